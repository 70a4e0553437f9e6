"""The team host: starts agent sessions when the server asks for them.

It holds ``/ws/host/`` open with the team's host token. On ``start`` (reason
``provision`` for a new teammate, ``resume`` for an inactive member a message
is waiting for) it runs that member's AgentSession with the token the frame
carries and answers ``started`` (or ``start_failed``). A start for a member
whose session this host is already running is answered ``started`` and
nothing else happens, so repeated starts never make two sessions. Every
session begins with a cold-resume: it reads its durable history first, so a
member whose earlier session died continues where that history stops.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

import websockets
from websockets.exceptions import InvalidStatus, WebSocketException

from agents.model import Model
from agents.session import AgentSession, SessionRefused

log = logging.getLogger(__name__)


class HostRefused(Exception):
    pass


def _ws_url(server: str) -> str:
    server = server.rstrip("/")
    return server.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + "/ws/host/"


class Host:
    def __init__(self, server: str, token: str, model_factory: Callable[[str], Model], *, max_backoff: float = 2.0):
        self.server = server.rstrip("/")
        self.token = token
        self.model_factory = model_factory
        self.max_backoff = max_backoff
        self.sessions: dict[str, tuple[AgentSession, asyncio.Task]] = {}
        self.starts: list[dict] = []  # every start frame received, for operators and tests
        self.connected = asyncio.Event()

    async def run(self) -> None:
        backoff = 0.1
        try:
            while True:
                try:
                    async with websockets.connect(
                        _ws_url(self.server),
                        additional_headers={"Authorization": f"Bearer {self.token}"},
                        open_timeout=10,
                        close_timeout=1,
                        max_queue=None,
                    ) as ws:
                        self.connected.set()
                        backoff = 0.1
                        log.info("host connected to %s", self.server)
                        async for raw in ws:
                            frame = json.loads(raw)
                            if frame.get("type") == "start":
                                await ws.send(json.dumps(self.start(frame)))
                            elif frame.get("type") == "error":
                                log.warning("server refused a host frame: %s", frame.get("error"))
                except InvalidStatus as exc:
                    if exc.response.status_code in (401, 403):
                        raise HostRefused(f"the server refused the host token ({exc.response.status_code})")
                    log.info("host websocket refused: %s", exc)
                except (OSError, WebSocketException, asyncio.TimeoutError, ValueError) as exc:
                    log.info("host websocket lost: %r", exc)
                finally:
                    self.connected.clear()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
        finally:
            await self.stop_sessions()

    def start(self, frame: dict) -> dict:
        """Run the member's session unless this host already runs it; answer the server."""
        member, token = frame.get("member", ""), frame.get("token", "")
        self.starts.append({"member": member, "reason": frame.get("reason")})
        running = self.sessions.get(member)
        if running is not None and not running[1].done():
            log.info("start %s (%s): already running", member, frame.get("reason"))
            return {"type": "started", "member": member}
        try:
            session = AgentSession(self.server, token, model_factory=self.model_factory, max_backoff=self.max_backoff)
        except Exception as exc:  # a model that cannot be built for this member
            return {"type": "start_failed", "member": member, "error": str(exc)[:4000]}
        task = asyncio.get_running_loop().create_task(self._supervise(member, session), name=f"session-{member}")
        self.sessions[member] = (session, task)
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

    async def stop_sessions(self) -> None:
        for session, task in list(self.sessions.values()):
            await session.stop()
            task.cancel()
        for _, task in list(self.sessions.values()):
            with contextlib.suppress(BaseException):
                await task
