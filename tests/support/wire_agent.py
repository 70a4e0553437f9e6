"""End-to-end helpers over the real wire: the scripted session (steerboard_agents.wire_agent),
a REST send, a bounded wait, and a scripted host."""
import asyncio
import contextlib
import json
import time

import httpx
import websockets

from steerboard_agents.wire_agent import WireAgent  # noqa: F401  (the tests' scripted session)


async def send_message(client: httpx.AsyncClient, base_url: str, token: str, target: str, content: str) -> dict:
    response = await client.post(
        f"{base_url}/api/v1/tools/send_message",
        json={"target": target, "message": content},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()
    return response.json()


def spawn(server, lead: str, names: list[str], prompt: str = "") -> None:
    """The lead spawns each of ``names`` over REST on a served application (a daphne process, or
    ``served_thread``); each must answer 200."""
    for name in names:
        response = httpx.post(
            f"{server.url}/api/v1/tools/spawn_teammate",
            json={"name": name, "description": "d", "prompt": prompt},
            headers={"Authorization": f"Bearer {lead}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text


def spawn_with_tokens(environment, server, lead: str, team: str, names: list[str], prompt: str = "") -> dict[str, str]:
    """``spawn``, then a token of each (``manage.py member_token`` on the live environment)."""
    spawn(server, lead, names, prompt)
    return {name: environment.manage_json("member_token", team, name)["token"] for name in names}


async def socket_open(server, token: str, path: str = "/ws/agent/", hello: bool = True):
    """A websocket of our own on ``path`` with ``token``; with ``hello``, a session's hello
    (idle) sent and the frames read up to its welcome."""
    ws = await websockets.connect(f"{server.ws_url}{path}", additional_headers={"Authorization": f"Bearer {token}"})
    if hello:
        await ws.send(json.dumps({"type": "hello", "status": "idle"}))
        while json.loads(await ws.recv())["type"] != "welcome":
            pass
    return ws


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
