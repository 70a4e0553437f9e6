"""AgentSession: one member's agent session over the wire contract.

It speaks ``/ws/agent/`` (hello, status, entries, tool calls; steer, prompt,
interrupt, ack, tool results, errors) and calls the ten Team tools over that
websocket while it is connected, over REST otherwise (steerboard_agents.client). The
session composes the pieces and dispatches the server's frames to them:

- sdk/steerboard_agents/connection.py: the reconnecting websocket (the token read again
  before each attempt, backoff up to ``max_backoff``).
- sdk/steerboard_agents/inbox.py: steered messages until a step boundary lets them in
  (``seq`` order, folding, replays). A steer for a message already in the
  conversation is folded and its entry reported again (the server folds it
  too, and records ``delivered`` if it had not).
- sdk/steerboard_agents/outbox.py: every entry reported and acknowledged before the session
  goes on, so what the conversation holds is durable; unacknowledged entries
  are resent after a reconnect (their ids make a resend harmless).
- sdk/steerboard_agents/turns.py: the turn runner (model call -> tool calls -> step boundary;
  prompts, interrupt, the session-local ``await_message``).
- sdk/steerboard_agents/resume.py: cold-resume. With ``resume=True`` the session first reads
  its durable history (GET /api/v1/session/history); resume.py says what it
  holds and the session continues from it, in the middle of a turn if it died
  in one.

The session owns the conversation (``entries``) and the ``status`` it reports.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from websockets.exceptions import WebSocketException

from steerboard_agents.client import ServerClient, SocketTools, ToolError
from steerboard_agents.connection import run_reconnecting
from steerboard_agents.inbox import Inbox
from steerboard_agents.model import Model
from steerboard_agents.outbox import Outbox
from steerboard_agents.resume import resume_point
from steerboard_agents.turns import Turns

log = logging.getLogger(__name__)


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
        self._outbox = Outbox(self._send, on_acked=self._acked)
        self._ws = None
        self._tools: SocketTools | None = None  # tool calls on the current connection
        self._features: set[str] = set()  # the welcome's: the optional frame fields the server takes
        self._stopping = asyncio.Event()
        self._turns = Turns(self, self._inbox, model=model, model_factory=model_factory, stopping=self._stopping)
        self._tasks: list[asyncio.Task] = []

    @property
    def model(self) -> Model | None:
        """The model (made by ``model_factory`` once the session knows its member)."""
        return self._turns.model

    @property
    def instructions(self) -> str | None:
        """The team policy the model's steps carry, read from the server when turns start."""
        return self._turns.instructions

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
            asyncio.create_task(self._turns.run(), name="session-turns"),
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
            close = getattr(self.model, "aclose", None)  # a model holding connections (a vendor SDK's client)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

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
        self._turns.restored(point)
        if point.open_turn is not None:
            self.status = "running"
            self.idle.clear()

    # --- the websocket -------------------------------------------------------------------------
    async def _connection_loop(self) -> None:
        await run_reconnecting(
            self, "ws/agent", label="agent", stopping=self._stopping, on_lost=self._connection_lost,
            refused=lambda status: SessionRefused(f"the server refused this session's token ({status})"),
            max_size=None,  # a tool_result is as large as its REST answer would be
        )

    async def _converse(self, ws) -> None:
        self._ws = ws
        self._outbox.connection_new()
        self._tools = SocketTools(ws.send, self._outbox)
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

    async def _status_send(self, status: str) -> None:
        # After the entries posted before it: the server takes a status after the entries it got first.
        await self._outbox.flush()
        await self._send({"type": "status", "status": status})

    async def _on_frame(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "welcome":
            self.member = frame.get("member", self.member)
            self.team = frame.get("team", self.team)
            self.client.member = self.member
            replay = int(frame.get("replay") or 0)
            self.stats["connects"] += 1
            self._features = set(frame.get("features") or ())  # what else this server's frames take
            if self._tools is not None:
                self._tools.carries = "tool_entries" in self._features
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
            self._turns.interrupt()
        elif kind == "ack":
            self._outbox.acked(frame.get("entry_id"), folded=bool(frame.get("folded")))
        elif kind == "acks":
            for ack in frame.get("acks") or ():
                self._outbox.acked(ack.get("entry_id"), folded=bool(ack.get("folded")))
        elif kind == "tool_result":
            for ack in frame.get("acks") or ():  # the last acks of the entries its tool frame carried
                self._outbox.acked(ack.get("entry_id"), folded=bool(ack.get("folded")))
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
            self._turns.wake()

    def _on_prompt(self, prompt: dict) -> None:
        prompt_id = str(prompt["id"])
        self.stats["prompts"] += 1
        log.info("%s: prompt received: %s from %s", self.member, prompt_id, prompt.get("author"))
        held = self._turns.prompt(prompt)
        if held is not None:
            # Pushed again (e.g. after a reconnect): it already has its turn. Report its entry again
            # (folded) and, if that turn is over, say idle again so the server completes it.
            asyncio.get_running_loop().create_task(self._prompt_again(held))

    async def _prompt_again(self, entry: dict) -> None:
        await self._send_entry(entry)
        if not self._turns.running(entry.get("turn_id")):
            await self._status_send(self.status)

    # --- reporting -----------------------------------------------------------------------------
    async def record(self, entry: dict) -> None:
        """Add an entry to the conversation and wait until the server holds it (for sdk/steerboard_agents/turns.py)."""
        self.entries.append(entry)
        await self._send_entry(entry)

    async def _send_entry(self, entry: dict) -> bool:
        return await self._outbox.report(entry)

    async def post(self, entry: dict) -> None:
        """Add an entry to the conversation and send it without waiting for its ack
        (for sdk/steerboard_agents/turns.py, which calls ``settle`` before anything leaves the session)."""
        self.entries.append(entry)
        await self._outbox.post(entry)

    async def settle(self) -> None:
        """Wait until the server holds every entry added so far."""
        await self._outbox.settled()

    async def status_set(self, status: str, *, sent: bool = False) -> None:
        """Report ``running`` or ``idle`` (for sdk/steerboard_agents/turns.py); ``sent``: it
        already went (``status_carry``)."""
        self.status = status
        if status == "idle":
            self.idle.set()
        else:
            self.idle.clear()
        if not sent:
            await self._status_send(status)

    async def status_carry(self, status: str) -> bool:
        """Send ``status`` with the entries not yet sent, in one ``entries`` frame, where the
        server takes that (its welcome's ``entries_status``): it sets the status once they are
        stored. False when it did not go that way (then ``status_set`` sends it)."""
        if "entries_status" not in self._features or not self.connected.is_set():
            return False
        carried = self._outbox.carry()
        if not carried:
            return False
        if await self._send({"type": "entries", "entries": carried, "status": status}):
            return True
        self._outbox.uncarried(carried)
        return False


def _describe(entry: dict) -> str:
    """One entry in a -v line: its kind and what tells it apart."""
    kind = entry.get("kind")
    usage = entry.get("usage")
    spent = ""
    if isinstance(usage, dict):
        spent = (f" (usage {usage.get('model')}: {usage.get('input_tokens')} in, {usage.get('cached_tokens')} cached, "
                 f"{usage.get('output_tokens')} out)")
    if kind in ("tool_call", "tool_result"):
        error = entry.get("error")
        return f"{kind} {entry.get('tool')}" + (f" error {error.get('code')}" if isinstance(error, dict) else "") + spent
    if kind == "user_message":
        return f"user_message from {(entry.get('source') or {}).get('sender')}"
    if kind == "turn_end":
        return f"turn_end {entry.get('reason')}"
    return str(kind) + spent


async def run_session(server: str, token: str, model_factory: Callable[[str], Any]) -> None:
    session = AgentSession(server, token, model_factory=model_factory)
    await session.run()
