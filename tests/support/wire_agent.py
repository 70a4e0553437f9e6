"""A scripted agent session over the real wire (the `websockets` client), for
multi-process, crash-window and load runs against real daphne processes.

It behaves as docs/protocol.md asks of a session: hello first; integrate steers in
``seq`` order, holding back a message that arrives after a gap until the
replay fills it; report one ``user_message`` entry per team message (entry id
derived from the message id, so a resent entry folds); resend every entry not
yet acknowledged after a reconnect; reconnect (to the next server in its
list) whenever the connection drops. Nothing here knows the server's insides.
"""
import asyncio
import contextlib
import json
import random
import time

import httpx
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


async def send_message(client: httpx.AsyncClient, base_url: str, token: str, target: str, content: str) -> dict:
    response = await client.post(
        f"{base_url}/api/v1/tools/send_message",
        json={"target": target, "message": content},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()
    return response.json()


async def wait_until(predicate, *, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    """Poll a predicate until it holds; fail with what we waited for (bounded, no timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"gave up waiting for {what} after {timeout}s")


class WireHost:
    """A team host on /ws/host/: records every start request and, when asked,
    starts a WireAgent for it (provision or cold-resume)."""

    def __init__(self, host_token: str, ws_url: str, *, agent_urls: list[str] | None = None, autostart: bool = True):
        self.host_token = host_token
        self.ws_url = ws_url
        self.agent_urls = agent_urls or [ws_url]
        self.autostart = autostart
        self.starts: list[dict] = []
        self.agents: dict[str, WireAgent] = {}
        self.last_seq: dict[str, int] = {}
        self._task: asyncio.Task | None = None
        self._ws = None
        self.connected = asyncio.Event()

    def start(self) -> "WireHost":
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async with websockets.connect(
            self.ws_url + "/ws/host/", additional_headers={"Authorization": f"Bearer {self.host_token}"}
        ) as ws:
            self._ws = ws
            self.connected.set()
            async for raw in ws:
                frame = json.loads(raw)
                if frame.get("type") != "start":
                    continue
                self.starts.append(frame)
                if self.autostart:
                    await self._start_agent(frame)

    async def _start_agent(self, frame: dict) -> None:
        name = frame["member"]
        previous = self.agents.get(name)
        if previous is not None:
            if previous._task is not None and not previous._task.done():
                # Still running: the start request is a repeat, whose new token revoked the
                # one this agent has (teams/tokens.py); its next connect uses the new one.
                previous.token = frame["token"]
                return
            self.last_seq[name] = previous.last_seq
        agent = WireAgent(name, frame["token"], self.agent_urls, last_seq=self.last_seq.get(name, 0))
        if previous is not None:
            agent.integrated = list(previous.integrated)
            agent.integrated_set = set(previous.integrated_set)
        self.agents[name] = agent.start()
        await self._ws.send(json.dumps({"type": "started", "member": name}))

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.stop()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
