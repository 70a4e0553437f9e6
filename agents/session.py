"""AgentSession: one member's agent session over the wire contract.

It speaks ``/ws/agent/`` (hello, status, entries, tool calls; steer, prompt,
interrupt, tool results) and calls the nine Team tools over that websocket
while it is connected, over REST otherwise (agents.client). A turn is a loop of
steps: model call -> tool calls -> step boundary. At each boundary the
messages steered in during the step enter the conversation in ``seq`` order,
each reported as a ``user_message`` entry carrying its team-message source
(that report is what makes the server record ``delivered``).

- A steer while idle starts a turn (cause ``steer``).
- A human prompt is always its own turn (cause ``prompt``); one that arrives
  while a turn runs waits until the session is idle.
- ``interrupt`` ends the current turn (``turn_end`` reason ``interrupted``) and
  keeps the inbox.
- A steer for a message id the session already holds is folded: never added
  twice; if it is already in the conversation its entry is reported again
  (the server folds it too, and records ``delivered`` if it had not).
- Every entry is reported and acknowledged before the session goes on, so what
  the conversation holds is durable; unacknowledged entries are resent after a
  reconnect (their ids make a resend harmless). agents/outbox.py keeps them.
- Cold-resume: with ``resume=True`` the session first reads its durable
  history (GET /api/v1/session/history) and continues from it, in the middle
  of a turn if it died in one. agents/resume.py reads what the history holds.

Session-local tool: ``await_message {sender?, timeout_ms?}`` waits, inside the
current step, until a message (from ``sender``, if given) is in the inbox; the
step boundary right after it lets the message in. It never touches the server.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from websockets.exceptions import WebSocketException

from agents.client import TEAM_TOOLS, ServerClient, SocketTools, ToolError
from agents.connection import run_reconnecting, ws_url
from agents.inbox import Inbox
from agents.model import Model, StepContext
from agents.outbox import Outbox
from agents.resume import OpenTurn, resume_point

log = logging.getLogger(__name__)

LOCAL_TOOLS = ("await_message",)
AWAIT_DEFAULT_MS = 600_000


class SessionRefused(Exception):
    """The server refused the token: retrying will not help."""


class AgentSession:
    def __init__(
        self,
        server: str,
        token: str,
        model: Model | None = None,
        *,
        model_factory: Callable[[str], Model] | None = None,
        resume: bool = True,
        max_backoff: float = 2.0,
    ):
        if model is None and model_factory is None:
            raise ValueError("give a model or a model_factory")
        self.server = server.rstrip("/")
        self.token = token
        self.model = model
        self.model_factory = model_factory
        self.resume = resume
        self.max_backoff = max_backoff
        self.client = ServerClient(self.server, token, max_backoff=max_backoff)
        self.member: str | None = None
        self.team: str | None = None
        self.status = "idle"
        self.entries: list[dict] = []  # the conversation, oldest first
        self.stats = {"connects": 0, "steers": 0, "folded_steers": 0, "prompts": 0, "folded_acks": 0}
        self.connected = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()

        self._inbox = Inbox()
        self._prompts: deque[dict] = deque()
        self._prompt_ids: set[str] = set()  # every prompt id seen: queued, running or in the history
        self._prompt_entries: dict[str, dict] = {}  # prompt id -> its entry in the conversation
        self._open_turn: OpenTurn | None = None  # a turn found unfinished in the history
        self._in_turn = False
        self._turn_id: str | None = None
        self._mark_resumed = False
        self._interrupt = asyncio.Event()
        self._work = asyncio.Event()
        self._outbox = Outbox(self._send, on_acked=self._acked)
        self._ws = None
        self._tools: SocketTools | None = None  # tool calls on the current connection
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.instructions: str | None = None

    @property
    def unacknowledged(self) -> int:
        """How many of this session's entries the server has not yet acknowledged."""
        return len(self._outbox)

    # --- lifecycle -----------------------------------------------------------------------------
    def token_replace(self, token: str) -> None:
        """Use ``token`` from now on (a host's later start carries a new one and the
        server revoked the earlier): the next request and the next reconnect send it."""
        self.token = token
        self.client.token_replace(token)

    async def run(self) -> None:
        """Run until stop() (or until the server refuses the token)."""
        if self.resume:
            while True:
                token = self.token
                try:
                    history = await self.client.history()
                    break
                except ToolError as exc:
                    if exc.status in (401, 403) and self.token != token:
                        continue  # a host's later start replaced the token meanwhile: try the new one
                    await self.client.aclose()
                    if exc.status in (401, 403):
                        raise SessionRefused(f"the server refused this session's token ({exc.code})")
                    raise
            self._restore(history)
        self._tasks = [
            asyncio.create_task(self._connection_loop(), name="session-connection"),
            asyncio.create_task(self._turn_loop(), name="session-turns"),
        ]
        try:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(BaseException):
                    await task
            await self.client.aclose()

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            task.cancel()

    def drop_connection(self) -> None:
        """Lose the websocket abruptly (no close handshake); the session reconnects."""
        if self._ws is not None:
            self._ws.transport.abort()

    # --- cold-resume ---------------------------------------------------------------------------
    def _restore(self, entries: list[dict]) -> None:
        point = resume_point(entries)
        self.member = self.client.member or self.member
        self.entries = list(entries)
        for held in point.messages:
            self._inbox.restored(*held)
        self.team = point.team or self.team
        self._prompt_ids.update(point.prompts)
        self._prompt_entries.update(point.prompts)
        if point.open_turn is not None:
            self._open_turn = point.open_turn
            self.status = "running"
            self.idle.clear()
            self._work.set()

    # --- the websocket -------------------------------------------------------------------------
    async def _connection_loop(self) -> None:
        await run_reconnecting(
            ws_url(self.server, "ws/agent"),
            token=lambda: self.token,
            converse=self._converse,
            refused=lambda status: SessionRefused(f"the server refused this session's token ({status})"),
            max_backoff=self.max_backoff,
            label="agent",
            stopping=self._stopping,
            on_lost=self._connection_lost,
            max_size=None,  # a tool_result is as large as its REST answer would be
        )

    async def _converse(self, ws) -> None:
        self._ws = ws
        self._outbox.connection_new()
        self._tools = SocketTools(ws.send)
        # The probe goes first: a server that does not know tool frames refuses it before its welcome.
        await ws.send(json.dumps(self._tools.probe_frame()))
        await ws.send(json.dumps({"type": "hello", "status": self.status}))
        async for raw in ws:
            await self._on_frame(json.loads(raw))

    def _connection_lost(self) -> None:
        self._ws = None
        self.connected.clear()
        self._drop_tools()

    def _drop_tools(self) -> None:
        """The socket is gone: tool calls go over REST; those in flight are repeated there (AnswerLost)."""
        tools, self._tools = self._tools, None
        if tools is not None:
            if self.client.transport is tools:
                self.client.transport = None
            tools.close()

    async def _send(self, frame: dict) -> bool:
        ws = self._ws
        if ws is None or not self.connected.is_set():
            return False
        try:
            await ws.send(json.dumps(frame))
            return True
        except (OSError, WebSocketException):
            return False

    async def _on_frame(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "welcome":
            self.member = frame.get("member", self.member)
            self.team = frame.get("team", self.team)
            self.client.member = self.member
            replay = int(frame.get("replay") or 0)
            self.stats["connects"] += 1
            if self._tools is not None:
                self._tools.welcomed()
                if self._tools.ready:
                    self.client.transport = self._tools
            self.connected.set()
            log.info("%s: connected to team %s (replay %s)", self.member, self.team, replay)
            self._inbox.welcome(replay)
            await self._outbox.welcomed()  # resend what was never acknowledged
        elif kind == "steer":
            self._on_steer(frame["message"])
        elif kind == "prompt":
            self._on_prompt(frame["prompt"])
        elif kind == "interrupt":
            log.info("%s: interrupt received", self.member)
            if self._in_turn:
                self._interrupt.set()
        elif kind == "ack":
            self._outbox.acked(frame.get("entry_id"), folded=bool(frame.get("folded")))
        elif kind == "tool_result":
            if self._tools is not None:
                self._tools.answer(frame)
        elif kind == "error":
            if (frame.get("error") or {}).get("code") == "HISTORY_QUOTA_EXCEEDED" and self._outbox.holds(frame.get("entry_id")):
                # The member's history quota (docs/operations.md): nothing was stored; it goes
                # again after the pause the server names. Its waiter (the turn) waits meanwhile.
                self.stats["quota_waits"] = self.stats.get("quota_waits", 0) + 1
                self._outbox.quota_paused(frame["entry_id"], float(frame.get("retry_after") or 1.0))
                return
            if (frame.get("error") or {}).get("code") == "SERVICE_UNAVAILABLE":
                # The server cannot reach its database: it closes the socket next (4503).
                # Nothing is refused: every unacknowledged entry goes again after the next welcome.
                log.warning("the server cannot reach its database; reconnecting")
                return
            if not self.connected.is_set() and self._tools is not None and self._tools.refused():
                log.info("the server takes no tool calls on the websocket (%s): they go over REST", frame.get("error"))
                return
            log.warning("server refused a frame: %s", frame.get("error"))
            self._outbox.refused(frame.get("error") or {})

    def _acked(self, entry: dict | None, folded: bool) -> None:
        if entry is not None:
            log.info("%s: entry recorded: %s%s", self.member, _describe(entry), " (folded)" if folded else "")
        if folded:
            self.stats["folded_acks"] += 1

    # --- inbox ---------------------------------------------------------------------------------
    def _on_steer(self, message: dict) -> None:
        self.stats["steers"] += 1
        log.info(
            "%s: steer received: message %s from %s (seq %s)", self.member, message["id"], message.get("sender"), message.get("seq")
        )
        held = self._inbox.steer(message)
        if held is not None:
            self.stats["folded_steers"] += 1
            if isinstance(held, dict):  # already in the conversation: report its entry again
                asyncio.get_running_loop().create_task(self._send_entry(held))
        if self._inbox:
            self._work.set()

    def _on_prompt(self, prompt: dict) -> None:
        prompt_id = str(prompt["id"])
        self.stats["prompts"] += 1
        log.info("%s: prompt received: %s from %s", self.member, prompt_id, prompt.get("author"))
        if prompt_id in self._prompt_entries:
            # Pushed again (e.g. after a reconnect): it already has its turn. Report its entry again
            # (folded) and, if that turn is over, say idle again so the server completes it.
            asyncio.get_running_loop().create_task(self._prompt_again(self._prompt_entries[prompt_id]))
            return
        if prompt_id in self._prompt_ids:
            return  # queued here already, or its turn is starting
        self._prompt_ids.add(prompt_id)
        self._prompts.append(prompt)
        self._work.set()

    async def _prompt_again(self, entry: dict) -> None:
        await self._send_entry(entry)
        if not (self._in_turn and self._turn_id == entry.get("turn_id")):
            await self._send({"type": "status", "status": self.status})

    # --- reporting -----------------------------------------------------------------------------
    async def _report(self, entry: dict) -> dict:
        """Add an entry to the conversation and wait until the server holds it."""
        entry.setdefault("id", uuid.uuid4().hex)
        if self._mark_resumed and entry.get("turn_id") == self._turn_id:
            entry["resumed"] = True  # the first entry a cold-resumed session adds to the turn it continues
            self._mark_resumed = False
        self.entries.append(entry)
        await self._send_entry(entry)
        return entry

    async def _send_entry(self, entry: dict) -> bool:
        return await self._outbox.report(entry)

    async def _set_status(self, status: str) -> None:
        self.status = status
        if status == "idle":
            self.idle.set()
        else:
            self.idle.clear()
        await self._send({"type": "status", "status": status})

    # --- turns ---------------------------------------------------------------------------------
    def _has_work(self) -> bool:
        return bool(self._open_turn or self._prompts or self._inbox.drainable())

    async def _turn_loop(self) -> None:
        await self.connected.wait()
        await self._inbox.replayed.wait()  # a resumed turn's next boundary must see what waited for it
        if self.model is None:
            self.model = self.model_factory(self.member or "")
        if self.instructions is None:
            self.instructions = await self.client.policy()
        while not self._stopping.is_set():
            if not self._has_work():
                self._work.clear()
                if not self._has_work():
                    await self._work.wait()
                continue
            await self.connected.wait()
            if self._open_turn is not None:
                await self._resume_turn(self._open_turn)
            elif self._prompts:
                await self._run_turn(cause="prompt", prompt=self._prompts.popleft())
            else:
                await self._run_turn(cause="steer")

    async def _run_turn(self, *, cause: str, prompt: dict | None = None) -> None:
        turn_id = uuid.uuid4().hex
        self._in_turn, self._turn_id = True, turn_id
        self._interrupt.clear()
        await self._set_status("running")
        log.info("%s: turn %s started (cause %s)", self.member, turn_id, cause)
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
        turn_id = open_turn.turn_id
        self._in_turn, self._turn_id = True, turn_id
        self._mark_resumed = True
        self._interrupt.clear()
        await self._set_status("running")
        log.info("%s: turn %s resumed from the history", self.member, turn_id)
        turn = [e for e in self.entries if e.get("turn_id") == turn_id]
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
                member=self.member or "",
                entries=self.entries,
                turn_id=turn_id,
                step=step,
                tools=[*TEAM_TOOLS, *LOCAL_TOOLS],
                instructions=self.instructions,
            )
            try:
                reply = await self._interruptible(self.model.step(context))
            except Exception as exc:  # a failing model ends its turn, not the session
                log.exception("the model failed at step %s of turn %s", step, turn_id)
                return await self._end_turn(turn_id, step, "error", error=f"{exc.__class__.__name__}: {exc}"[:2000])
            if reply is None:
                return await self._end_turn(turn_id, step, "interrupted")
            if reply.text:
                await self._report({"kind": "assistant_text", "turn_id": turn_id, "step": step, "text": reply.text})
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
                await self._report(entry)
                if not await self._run_tool(turn_id, step, entry):
                    return await self._end_turn(turn_id, step, "interrupted")
            step += 1  # the step boundary: steered messages enter here
            await self._integrate(turn_id, step)

    async def _run_tool(self, turn_id: str, step: int, call: dict, repeat: bool = False) -> bool:
        """Run one reported tool call and report its result. False when interrupted."""
        arguments = call.get("arguments") or {}
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
            return {"result": await self.client.tool(name, arguments, call_id=call_id, repeat=repeat)}
        except ToolError as exc:
            return {"error": exc.as_dict()}
        except TypeError as exc:
            return {"error": {"code": "VALIDATION_ERROR", "message": str(exc)}}

    async def _await_message(self, sender: str | None = None, timeout_ms: int = AWAIT_DEFAULT_MS) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            ready = [m for m in self._inbox.drainable() if sender is None or m["sender"] == sender]
            if ready:
                return {
                    "timed_out": False,
                    "arrived": [{"sender": m["sender"], "message_id": m["id"]} for m in self._inbox.drainable()],
                }
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
            entry = {
                "id": f"msg-{message_id}",
                "kind": "user_message",
                "turn_id": turn_id,
                "step": step,
                "text": message.get("content", ""),
                "source": {
                    "kind": "team-message",
                    "message_id": message_id,
                    "sender": message.get("sender"),
                    "team": self.team,
                    "seq": message.get("seq"),
                },
            }
            self._inbox.entered(message, entry)
            await self._report(entry)

    async def _end_turn(self, turn_id: str, step: int, reason: str, error: str | None = None) -> None:
        entry = {"kind": "turn_end", "turn_id": turn_id, "step": step, "reason": reason}
        if error:
            entry["error"] = error
        await self._report(entry)
        log.info("%s: turn %s ended (%s)", self.member, turn_id, reason)
        self._in_turn = False
        self._interrupt.clear()
        await self._set_status("idle")


def _describe(entry: dict) -> str:
    """One entry in a -v line: its kind and what tells it apart."""
    kind = entry.get("kind")
    if kind in ("tool_call", "tool_result"):
        error = entry.get("error")
        return f"{kind} {entry.get('tool')}" + (f" error {error.get('code')}" if isinstance(error, dict) else "")
    if kind == "user_message":
        return f"user_message from {(entry.get('source') or {}).get('sender')}"
    if kind == "turn_end":
        return f"turn_end {entry.get('reason')}"
    return str(kind)


async def run_session(server: str, token: str, model_factory: Callable[[str], Any]) -> None:
    session = AgentSession(server, token, model_factory=model_factory)
    await session.run()
