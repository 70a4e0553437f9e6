"""The team host: starts agent sessions when the server asks for them.

It holds ``/ws/host/`` open with the team's host token. On ``start`` (reason
``provision`` for a new teammate, ``resume`` for an inactive member a message
is waiting for) it runs that member's AgentSession with the token the frame
carries and answers ``started`` (or ``start_failed``). A start for a member
whose session this host is already running is answered ``started`` and
nothing else happens, so repeated starts never make two sessions (the
session takes the start's new token: the server revoked its earlier one). Every
session begins with a cold-resume: it reads its durable history first, so a
member whose earlier session died continues where that history stops.

With a state file (``--state PATH``) the host writes down each member it runs
with its token; a host started again with the same file runs those sessions
again at once, so a member whose session died in the middle of a turn picks
that turn up even when no message comes to wake it.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from steerboard_agents.connection import run_reconnecting
from steerboard_agents.model import Model
from steerboard_agents.session import AgentSession, SessionRefused

log = logging.getLogger(__name__)


class HostRefused(Exception):
    pass


class Host:
    def __init__(
        self,
        server: str,
        token: str,
        model_factory: Callable[[str], Model],
        *,
        max_backoff: float = 2.0,
        state_path: str | Path | None = None,
    ):
        self.server = server.rstrip("/")
        self.token = token
        self.model_factory = model_factory
        self.max_backoff = max_backoff
        self.state_path = Path(state_path) if state_path else None
        self.sessions: dict[str, tuple[AgentSession, asyncio.Task]] = {}
        self.starts: list[dict] = []  # every start frame received, for operators and tests
        self.connected = asyncio.Event()

    async def run(self) -> None:
        for member, token in self._state_read().items():
            self.start({"type": "start", "member": member, "token": token, "reason": "restore"})
        try:
            await run_reconnecting(
                self, "ws/host", label="host", on_lost=self.connected.clear,
                refused=lambda status: HostRefused(f"the server refused the host token ({status})"),
            )
        finally:
            await self.stop_sessions()

    async def _converse(self, ws) -> None:
        self.connected.set()
        log.info("host connected to %s", self.server)
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") == "start":
                await ws.send(json.dumps(self.start(frame)))
            elif frame.get("type") == "error":
                log.warning("server refused a host frame: %s", frame.get("error"))

    def start(self, frame: dict) -> dict:
        """Run the member's session unless this host already runs it; answer the server."""
        member, token = frame.get("member", ""), frame.get("token", "")
        self.starts.append({"member": member, "reason": frame.get("reason")})
        running = self.sessions.get(member)
        if running is not None and not running[1].done():
            # The server revoked the session's earlier start token when it minted this
            # one (teams/tokens.py): the running session reconnects with the new one.
            if token and token != running[0].token:
                running[0].token_replace(token)
                self._state_write(member, token)
            log.info("start %s (%s): already running", member, frame.get("reason"))
            return {"type": "started", "member": member}
        try:
            session = AgentSession(self.server, token, model_factory=self.model_factory, max_backoff=self.max_backoff)
        except Exception as exc:  # a model that cannot be built for this member
            return {"type": "start_failed", "member": member, "error": str(exc)[:4000]}
        task = asyncio.get_running_loop().create_task(self._supervise(member, session), name=f"session-{member}")
        self.sessions[member] = (session, task)
        self._state_write(member, token)
        log.info("start %s (%s): session started", member, frame.get("reason"))
        return {"type": "started", "member": member}

    async def _supervise(self, member: str, session: AgentSession) -> None:
        try:
            await session.run()
        except SessionRefused as exc:
            log.warning("session %s ended: %s", member, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s failed", member)

    # --- the state file --------------------------------------------------------------------
    def _state_read(self) -> dict[str, str]:
        if self.state_path is None or not self.state_path.exists():
            return {}
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            log.warning("cannot read the host state %s; starting without it", self.state_path)
            return {}
        if data.get("server") != self.server:
            return {}
        return {m: t for m, t in data.get("members", {}).items() if isinstance(t, str)}

    def _state_write(self, member: str, token: str) -> None:
        if self.state_path is None:
            return
        members = self._state_read()
        members[member] = token
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state_path.with_suffix(".tmp")
        # The file holds member tokens: only its owner may read it.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"server": self.server, "members": members}, f)
        os.replace(temporary, self.state_path)

    async def stop_sessions(self) -> None:
        for session, task in list(self.sessions.values()):
            await session.stop()
            task.cancel()
        for _, task in list(self.sessions.values()):
            with contextlib.suppress(BaseException):
                await task
