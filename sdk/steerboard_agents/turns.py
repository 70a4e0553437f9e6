"""The turn runner: one session's turns, each a loop of steps.

A step is a model call, then its tool calls in order, then the step boundary,
where the messages steered in during the step (sdk/steerboard_agents/inbox.py) enter the
conversation in ``seq`` order. A reply without tool calls ends the turn.

- What starts a turn: a turn the history left open (cold-resume,
  sdk/steerboard_agents/resume.py) goes first, then a waiting human prompt (always its own
  turn, cause ``prompt``), then steered messages (cause ``steer``).
- ``interrupt()`` ends the running turn at its next wait (``turn_end`` reason
  ``interrupted``); the inbox is kept for the next turn.
- A prompt that already had its turn is not run again (``prompt`` returns its
  entry for the session to report again).

Session-local tool: ``await_message {sender?, ask_id?, timeout_ms?}`` waits, inside
the current step, until a message (from ``sender``, or answering the ``ask_human``
``ask_id``, if given) is in the inbox; the step boundary right after it lets the
message in. It never touches the server. A person's answer to an ask enters as a
``user_message`` whose source is ``{"kind": "human-answer", "message_id", "ask_id",
"decision", "answered_by", ...}`` (docs/agents.md, "Asking a person").

What a step gives the model: the conversation, the tool names and their
descriptions (the Team tools' from ``GET /api/v1/tools``, read once with the
team policy, and ``await_message``'s below). What a reply's ``usage`` becomes:
the ``usage`` field of the first entry the reply produced (its
``assistant_text``, else its first ``tool_call``), so each reply is counted
once; a reply with neither is recorded as an empty ``assistant_text`` to carry
it. A model that raises ends its turn with ``reason: error`` and the error's
text; the session and its next turns go on.

The runner talks to its session only through ``Conversation``: the session
holds the conversation, reports entries and status, and calls the Team tools.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable
from typing import Protocol

from steerboard_agents import tracing
from steerboard_agents.client import ServerClient, ToolError
from steerboard_protocol.tools import TEAM_TOOLS
from steerboard_agents.inbox import Inbox
from steerboard_agents.model import Model, ModelError, ModelReply, StepContext
from steerboard_agents.resume import OpenTurn, ResumePoint

log = logging.getLogger(__name__)

LOCAL_TOOLS = ("await_message",)
AWAIT_DEFAULT_MS = 600_000
# await_message as a model sees it (StepContext.tool_specs), beside the Team tools' own descriptions.
LOCAL_TOOL_SPECS = [
    {
        "name": "await_message",
        "description": "Wait, inside this step, until a message (from `sender`, or the person's answer to your "
        "ask_human `ask_id`, if given) has arrived for you; it enters the conversation right after this call. "
        "Answers {timed_out, arrived: [{sender, message_id}]} (an answer to an ask also names its ask_id and "
        "decision). Runs in your own session: it costs the team nothing while it waits.",
        "input_schema": {
            "type": "object",
            "properties": {
                "sender": {"type": "string", "description": "wait for a message from this member only"},
                "ask_id": {"type": "string", "description": "wait for the answer to this ask_human call"},
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "default": AWAIT_DEFAULT_MS,
                    "description": "give up after this long (default 600000: ten minutes)",
                },
            },
            "additionalProperties": False,
        },
    }
]


class Conversation(Protocol):
    """What the turn runner needs of the session that composes it."""

    member: str | None
    team: str | None
    entries: list[dict]  # the conversation, oldest first
    client: ServerClient
    connected: asyncio.Event

    async def record(self, entry: dict) -> None:
        """Add ``entry`` to the conversation and wait until the server holds it."""

    async def post(self, entry: dict) -> None:
        """Add ``entry`` to the conversation and send it; ``settle`` waits for the server to hold it."""

    async def settle(self) -> None:
        """Wait until the server holds every entry added so far."""

    async def status_set(self, status: str) -> None:
        """Report ``running`` or ``idle``."""


class Turns:
    def __init__(
        self,
        session: Conversation,
        inbox: Inbox,
        *,
        model: Model | None,
        model_factory: Callable[[str], Model] | None,
        stopping: asyncio.Event,
    ):
        self._session = session
        self._inbox = inbox
        self._stopping = stopping
        self.model = model
        self.model_factory = model_factory
        self.instructions: str | None = None
        self.tool_specs: list[dict] | None = None  # the tools' descriptions for the model, read once
        self.prompts: deque[dict] = deque()  # human prompts waiting for their turn
        self._prompt_ids: set[str] = set()  # every prompt id seen: queued, running or in the history
        self._prompt_entries: dict[str, dict] = {}  # prompt id -> its entry in the conversation
        self._open_turn: OpenTurn | None = None  # a turn found unfinished in the history
        self._in_turn = False
        self._turn_id: str | None = None  # the turn running now, or the last one
        self._mark_resumed = False
        self._interrupt = asyncio.Event()
        self._work = asyncio.Event()
        self._trace = tracing.TurnTrace()  # the running turn's span (sdk/steerboard_agents/tracing.py)

    # --- what the session tells the runner -----------------------------------------------------
    def restored(self, point: ResumePoint) -> None:
        """Cold-resume: the prompts the history holds had their turn; an open turn goes on first."""
        self._prompt_ids.update(point.prompts)
        self._prompt_entries.update(point.prompts)
        if point.open_turn is not None:
            self._open_turn = point.open_turn
            self._work.set()

    def wake(self) -> None:
        """There may be work: a steered message is in the inbox."""
        self._work.set()

    def prompt(self, prompt: dict) -> dict | None:
        """Take a pushed human prompt. Returns its entry when it already had its turn
        (report it again), else None (queued, or queued or running already)."""
        prompt_id = str(prompt["id"])
        if prompt_id in self._prompt_entries:
            return self._prompt_entries[prompt_id]
        if prompt_id not in self._prompt_ids:
            self._prompt_ids.add(prompt_id)
            self.prompts.append(prompt)
            self._work.set()
        return None

    def interrupt(self) -> None:
        if self._in_turn:
            self._interrupt.set()

    def running(self, turn_id: str | None) -> bool:
        """Whether the turn ``turn_id`` is running now."""
        return self._in_turn and self._turn_id == turn_id

    # --- the loop ------------------------------------------------------------------------------
    def _has_work(self) -> bool:
        return bool(self._open_turn or self.prompts or self._inbox.drainable())

    async def run(self) -> None:
        """Run turns until the session stops: from its first connection and replay on."""
        session = self._session
        await session.connected.wait()
        await self._inbox.replayed.wait()  # a resumed turn's next boundary must see what waited for it
        if self.model is None:
            self.model = self.model_factory(session.member or "")
        if self.instructions is None:
            self.instructions = await session.client.policy()
        if self.tool_specs is None:
            catalogue = await session.client.tool_catalogue()
            offered = [{k: t.get(k) for k in ("name", "description", "input_schema")} for t in catalogue]
            self.tool_specs = [t for t in offered if t["name"] in TEAM_TOOLS] + LOCAL_TOOL_SPECS
        while not self._stopping.is_set():
            if not self._has_work():
                self._work.clear()
                if not self._has_work():
                    await self._work.wait()
                continue
            await session.connected.wait()
            if self._open_turn is not None:
                await self._resume_turn(self._open_turn)
            elif self.prompts:
                await self._run_turn(cause="prompt", prompt=self.prompts.popleft())
            else:
                await self._run_turn(cause="steer")

    async def _report(self, entry: dict) -> None:
        entry.setdefault("id", uuid.uuid4().hex)
        if self._mark_resumed and entry.get("turn_id") == self._turn_id:
            entry["resumed"] = True  # the first entry a cold-resumed session adds to the turn it continues
            self._mark_resumed = False
        # Sent now, acknowledged later: the runner settles before a tool call and at the end of
        # a turn, so nothing leaves the session before the history that led to it is durable.
        await self._session.post(entry)

    async def _run_turn(self, *, cause: str, prompt: dict | None = None) -> None:
        turn_id = uuid.uuid4().hex
        # A turn for steered messages continues the trace of the first one that carries one.
        starting = self._inbox.drainable() if prompt is None else []
        with tracing.turn_span(member=self._session.member or "", team=self._session.team, turn_id=turn_id,
                               cause=cause, messages=starting) as self._trace:
            try:
                await self._turn(turn_id, cause=cause, prompt=prompt)
            finally:
                self._trace = tracing.TurnTrace()

    async def _turn(self, turn_id: str, *, cause: str, prompt: dict | None) -> None:
        self._in_turn, self._turn_id = True, turn_id
        self._interrupt.clear()
        await self._session.status_set("running")
        log.info("%s: turn %s started (cause %s)", self._session.member, turn_id, cause)
        await self._report({"kind": "turn_start", "turn_id": turn_id, "step": 0, "cause": cause})
        if prompt is not None:
            entry = {
                "id": f"prompt-{prompt['id']}",
                "kind": "prompt",
                "turn_id": turn_id,
                "step": 0,
                "prompt_id": prompt["id"],
                "author": prompt.get("author"),
                "text": prompt.get("content", ""),
            }
            self._prompt_ids.add(str(prompt["id"]))
            self._prompt_entries[str(prompt["id"])] = entry
            await self._report(entry)
        else:
            await self._integrate(turn_id, 0)
        await self._steps(turn_id, 0)

    async def _resume_turn(self, open_turn: OpenTurn) -> None:
        """Continue a turn the history left unfinished: finish its pending tool calls, then go on."""
        self._open_turn = None
        with tracing.turn_span(member=self._session.member or "", team=self._session.team,
                               turn_id=open_turn.turn_id, cause="resume") as self._trace:
            try:
                await self._turn_resumed(open_turn)
            finally:
                self._trace = tracing.TurnTrace()

    async def _turn_resumed(self, open_turn: OpenTurn) -> None:
        turn_id = open_turn.turn_id
        self._in_turn, self._turn_id = True, turn_id
        self._mark_resumed = True
        self._interrupt.clear()
        await self._session.status_set("running")
        log.info("%s: turn %s resumed from the history", self._session.member, turn_id)
        turn = open_turn.entries
        step = max((int(e.get("step") or 0) for e in turn), default=0)
        results = {e["call_id"] for e in turn if e.get("kind") == "tool_result"}
        in_step = [e for e in turn if int(e.get("step") or 0) == step]
        for call in [e for e in in_step if e.get("kind") == "tool_call" and e["call_id"] not in results]:
            if not await self._run_tool(turn_id, step, call, repeat=True):
                return await self._end_turn(turn_id, step, "interrupted")
        kinds = {e.get("kind") for e in in_step}
        if "tool_call" in kinds:
            step += 1
            await self._integrate(turn_id, step)
        elif "assistant_text" in kinds:
            return await self._end_turn(turn_id, step, "done")  # the model had given its final answer
        await self._steps(turn_id, step)

    async def _steps(self, turn_id: str, step: int) -> None:
        while True:
            if self._interrupt.is_set():
                return await self._end_turn(turn_id, step, "interrupted")
            context = StepContext(
                member=self._session.member or "",
                entries=self._session.entries,
                turn_id=turn_id,
                step=step,
                tools=[*TEAM_TOOLS, *LOCAL_TOOLS],
                instructions=self.instructions,
                tool_specs=list(self.tool_specs or LOCAL_TOOL_SPECS),
                team=self._session.team,
            )
            try:
                reply = await self._interruptible(self.model.step(context))
            except ModelError as exc:  # the vendor refused, after the retries it allows: this turn ends
                log.warning("%s: the model failed at step %s of turn %s: %s", context.member, step, turn_id, exc)
                return await self._end_turn(turn_id, step, "error", error=str(exc)[:2000] or "ModelError")
            except Exception as exc:  # a failing model ends its turn, not the session
                log.exception("the model failed at step %s of turn %s", step, turn_id)
                return await self._end_turn(turn_id, step, "error", error=f"{exc.__class__.__name__}: {exc}"[:2000])
            if reply is None:
                return await self._end_turn(turn_id, step, "interrupted")
            usage = _usage_of(reply)
            if reply.text or (usage and not reply.tool_calls):
                entry = {"kind": "assistant_text", "turn_id": turn_id, "step": step, "text": reply.text or ""}
                if usage:
                    entry["usage"], usage = usage, None
                await self._report(entry)
            if not reply.tool_calls:
                return await self._end_turn(turn_id, step, "done")
            for call in reply.tool_calls:
                entry = {
                    "kind": "tool_call",
                    "turn_id": turn_id,
                    "step": step,
                    "call_id": uuid.uuid4().hex,
                    "tool": call.name,
                    "arguments": dict(call.arguments),
                }
                if call.name in LOCAL_TOOLS:
                    entry["local"] = True
                if usage:
                    entry["usage"], usage = usage, None
                await self._report(entry)
                if not await self._run_tool(turn_id, step, entry):
                    return await self._end_turn(turn_id, step, "interrupted")
            step += 1  # the step boundary: steered messages enter here
            await self._integrate(turn_id, step)

    async def _run_tool(self, turn_id: str, step: int, call: dict, repeat: bool = False) -> bool:
        """Run one reported tool call and report its result. False when interrupted."""
        arguments = call.get("arguments") or {}
        if call["tool"] not in TEAM_TOOLS:
            await self._session.settle()  # the call and everything before it are durable before it runs
        # A Team tool's call settles the same way, or its tool frame carries the entries not yet sent
        # (the server runs it once they are stored): ServerClient.tool's ``durable``.
        outcome = await self._interruptible(self._execute(call["tool"], arguments, call["call_id"], repeat=repeat))
        result = {"kind": "tool_result", "turn_id": turn_id, "step": step, "call_id": call["call_id"], "tool": call["tool"]}
        if outcome is None:
            result["error"] = {"code": "INTERRUPTED", "message": "The turn was interrupted."}
            await self._report(result)
            return False
        result.update(outcome)
        await self._report(result)
        return True

    async def _execute(self, name: str, arguments: dict, call_id: str, repeat: bool = False) -> dict:
        try:
            if name == "await_message":
                return {"result": await self._await_message(**arguments)}
            if name not in TEAM_TOOLS:
                raise ToolError("NOT_FOUND", f"No tool named {name!r}.")
            return {"result": await self._session.client.tool(name, arguments, call_id=call_id, repeat=repeat,
                                                              durable=self._session.settle)}
        except ToolError as exc:
            return {"error": exc.as_dict()}
        except TypeError as exc:
            return {"error": {"code": "VALIDATION_ERROR", "message": str(exc)}}

    async def _await_message(
        self, sender: str | None = None, ask_id: str | None = None, timeout_ms: int = AWAIT_DEFAULT_MS
    ) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            ready = [
                m for m in self._inbox.drainable()
                if (sender is None or m["sender"] == sender) and (ask_id is None or m.get("ask_id") == ask_id)
            ]
            if ready:
                return {"timed_out": False, "arrived": [_arrived(m) for m in self._inbox.drainable()]}
            self._inbox.changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return {"timed_out": True, "arrived": []}
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._inbox.changed.wait(), remaining)

    async def _interruptible(self, coro):
        """Run coro unless the turn is interrupted first (then None)."""
        work = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self._interrupt.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()  # the session is stopping: leave no model call or request behind
            raise
        finally:
            stop.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        return None

    async def _integrate(self, turn_id: str, step: int) -> None:
        """The step boundary: steered messages enter the conversation in seq order."""
        pause = getattr(self.model, "step_delay", 0) if self._inbox.drainable() else 0
        if pause:  # a paced model (keyless --step-delay): the messages wait, accepted, where a person sees them
            await asyncio.sleep(pause)
        for message in self._inbox.drainable():
            message_id = message["id"]
            source = {
                "kind": "team-message",
                "message_id": message_id,
                "sender": message.get("sender"),
                "team": self._session.team,
                "seq": message.get("seq"),
            }
            if message.get("kind") == "human_answer":  # a person's answer to this member's ask_human
                source.update(
                    kind="human-answer", ask_id=message.get("ask_id"), decision=message.get("decision"),
                    answered_by=message.get("answered_by"),
                )
            entry = {
                "id": f"msg-{message_id}",
                "kind": "user_message",
                "turn_id": turn_id,
                "step": step,
                "text": message.get("content", ""),
                "source": source,
            }
            self._inbox.entered(message, entry)
            self._trace.entered(message)
            await self._report(entry)

    async def _end_turn(self, turn_id: str, step: int, reason: str, error: str | None = None) -> None:
        entry = {"kind": "turn_end", "turn_id": turn_id, "step": step, "reason": reason}
        if error:
            entry["error"] = error
        self._trace.ended(reason, error)
        await self._report(entry)
        # The idle status goes with the turn's last entries where the server takes that (it sets
        # it once they are stored), else after their acks.
        sent = await self._session.status_carry("idle")
        await self._session.settle()
        log.info("%s: turn %s ended (%s)", self._session.member, turn_id, reason)
        self._in_turn = False
        self._interrupt.clear()
        await self._session.status_set("idle", sent=sent)


def _arrived(message: dict) -> dict:
    """What await_message says of a message that arrived (an answer to an ask: which, and the decision)."""
    arrived = {"sender": message["sender"], "message_id": message["id"]}
    if message.get("ask_id"):
        arrived.update(ask_id=message["ask_id"], decision=message.get("decision"))
    return arrived


def _usage_of(reply: ModelReply) -> dict | None:
    """The reply's usage as the entry field docs/protocol.md describes, or None."""
    usage = getattr(reply, "usage", None)
    return usage.as_entry() if usage is not None else None
