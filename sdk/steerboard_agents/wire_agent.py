"""A scripted session on the bare wire protocol (docs/protocol.md), with no model
and no turns: every team message becomes one ``user_message`` entry.

For load, soak and fault runs against real servers (``bench/``, the end-to-end
tests), and as a compact reference of what the protocol asks of a session:
hello first; integrate steers in ``seq`` order, holding back a message that
arrives after a gap until the replay fills it; report one entry per team
message (entry id derived from the message id, so a resent entry folds);
resend every entry not yet acknowledged after a welcome; reconnect (to the
next server in its list) whenever the connection drops. It records when each
message was first steered, when its entry was sent and when it was
acknowledged (``first_seen``, ``entry_sent_at``, ``acked_at``: monotonic
times), which is what the benchmarks measure. A real agent wants
``steerboard_agents.AgentSession`` (turns, tools, resume).
"""
import asyncio
import contextlib
import json
import random
import time

import websockets


class WireAgent:
    def __init__(self, name: str, token: str, ws_urls: list[str], *, status: str = "idle", last_seq: int = 0):
        self.name = name
        self.token = token
        self.ws_urls = list(ws_urls)
        self.status = status
        self.last_seq = last_seq  # highest seq integrated, in order
        self.integrated: list[str] = []  # message ids, in the order they entered the history
        self.integrated_set: set[str] = set()
        self.held: dict[int, dict] = {}  # seq -> message that arrived after a gap
        self.unacked: dict[str, dict] = {}  # entry id -> entry
        self.first_seen: dict[str, float] = {}  # message id -> monotonic time of its first steer
        self.entry_sent_at: dict[str, float] = {}  # message id -> monotonic time its entry was first sent
        self.acked_at: dict[str, float] = {}  # message id -> monotonic time its entry was acknowledged
        self.connects = 0
        self.errors: list[dict] = []
        self._ws = None
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._url_index = 0
        self.welcomed = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "WireAgent":
        if self._task is None:  # once: a second start is a no-op
            self._task = asyncio.create_task(self._run(), name=f"agent-{self.name}")
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)

    def drop(self) -> None:
        """Lose the connection abruptly (no close handshake); the agent reconnects."""
        ws = self._ws
        if ws is not None:
            self.welcomed.clear()
            ws.transport.abort()

    def prefer(self, ws_url: str) -> None:
        """Connect to this server next time."""
        if ws_url in self.ws_urls:
            self._url_index = self.ws_urls.index(ws_url)

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stop.is_set():
            url = self.ws_urls[self._url_index % len(self.ws_urls)]
            try:
                async with websockets.connect(
                    url + "/ws/agent/",
                    additional_headers={"Authorization": f"Bearer {self.token}"},
                    open_timeout=5,
                    close_timeout=1,
                    max_queue=None,
                ) as ws:
                    self._ws = ws
                    self.connects += 1
                    backoff = 0.05
                    await ws.send(json.dumps({"type": "hello", "status": self.status}))
                    async for raw in ws:
                        await self._frame(ws, json.loads(raw))
            except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError):
                pass
            finally:
                self._ws = None
                self.welcomed.clear()
            if self._stop.is_set():
                return
            # Next server, after a short jittered pause.
            self._url_index += 1
            await asyncio.sleep(backoff * (1 + random.random()))
            backoff = min(backoff * 2, 1.0)

    # --- frames -------------------------------------------------------------------------------------
    async def _frame(self, ws, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "welcome":
            for entry in list(self.unacked.values()):
                await ws.send(json.dumps({"type": "entry", "entry": entry}))
            self.welcomed.set()
        elif kind == "steer":
            await self._steer(ws, frame["message"])
        elif kind == "ack":
            entry = self.unacked.pop(frame["entry_id"], None)
            if entry is not None:
                self.acked_at.setdefault(entry["source"]["message_id"], time.monotonic())
        elif kind == "error":
            self.errors.append(frame)

    async def _steer(self, ws, message: dict) -> None:
        self.first_seen.setdefault(message["id"], time.monotonic())
        seq = message["seq"]
        if message["id"] in self.integrated_set or seq <= self.last_seq:
            return  # a repeated doorbell: already in the history
        self.held[seq] = message
        while self.last_seq + 1 in self.held:
            current = self.held.pop(self.last_seq + 1)
            self.last_seq += 1
            await self._integrate(ws, current)

    async def _integrate(self, ws, message: dict) -> None:
        entry = {
            "id": f"{self.name}:{message['id']}",
            "kind": "user_message",
            "text": message["content"],
            "seq": message["seq"],
            "sender": message["sender"],
            "source": {"kind": "team-message", "message_id": message["id"]},
        }
        self.integrated.append(message["id"])
        self.integrated_set.add(message["id"])
        self.unacked[entry["id"]] = entry
        self.entry_sent_at.setdefault(message["id"], time.monotonic())
        await ws.send(json.dumps({"type": "entry", "entry": entry}))

    @property
    def settled(self) -> bool:
        """Connected, nothing held back and every entry acknowledged."""
        return self._ws is not None and self.welcomed.is_set() and not self.held and not self.unacked
