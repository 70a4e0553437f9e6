"""In-process clients of the real ASGI application: REST through httpx's ASGI
transport, websockets through Channels' WebsocketCommunicator, on the test
database and the configured channel layer."""
import asyncio
import itertools
import json

import httpx
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from teams.services import member_token_create, team_create

_entry_ids = itertools.count(1)


def auth(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


class Api:
    def __init__(self):
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://testserver")

    async def tool(self, token: str | None, tool_name: str, body=None, **arguments) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if body is not None:
            return await self.http.post(f"/api/v1/tools/{tool_name}", content=body, headers=headers)
        return await self.http.post(f"/api/v1/tools/{tool_name}", json=arguments, headers=headers)

    async def ok(self, token: str, tool_name: str, **arguments) -> dict:
        response = await self.tool(token, tool_name, **arguments)
        assert response.status_code == 200, response.text
        return response.json()

    async def close(self):
        await self.http.aclose()


class Agent:
    """One agent session on /ws/agent/, speaking the wire protocol by hand."""

    def __init__(self, token: str, path: str = "/ws/agent/"):
        self.comm = WebsocketCommunicator(application, path, headers=auth(token))
        self.buffer: list[dict] = []

    async def connect(self, status: str | None = "idle") -> dict | None:
        connected, _ = await self.comm.connect()
        assert connected
        if status is None:
            return None
        await self.comm.send_json_to({"type": "hello", "status": status})
        return await self.expect("welcome")

    async def send(self, frame: dict) -> None:
        await self.comm.send_json_to(frame)

    async def expect(self, type_: str, timeout: float = 5) -> dict:
        for i, frame in enumerate(self.buffer):
            if frame["type"] == type_:
                return self.buffer.pop(i)
        while True:
            frame = await self.comm.receive_json_from(timeout=timeout)
            if frame["type"] == type_:
                return frame
            self.buffer.append(frame)

    async def nothing(self, type_: str, timeout: float = 0.3) -> bool:
        """True when no frame of this type arrives within the timeout."""
        if any(f["type"] == type_ for f in self.buffer):
            return False
        while not await self.comm.receive_nothing(timeout):
            frame = await self.comm.receive_json_from()
            self.buffer.append(frame)
            if frame["type"] == type_:
                return False
        return True

    async def status(self, status: str) -> None:
        await self.send({"type": "status", "status": status})
        await asyncio.sleep(0.05)

    async def integrate(self, message: dict, entry_id: str | None = None) -> dict:
        """Put a steered message into the history, as an SDK does at a step boundary."""
        entry = {
            "id": entry_id or f"entry-{next(_entry_ids)}",
            "kind": "user_message",
            "text": message["content"],
            "source": {"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
        }
        await self.send({"type": "entry", "entry": entry})
        return await self.expect("ack")

    async def close(self) -> None:
        await self.comm.disconnect()


@database_sync_to_async
def team_new(name: str = "alpha") -> dict:
    team, lead, lead_token, host_token = team_create(name=name)
    return {"team": team, "lead": lead_token, "host": host_token}


@database_sync_to_async
def token_for(team: str, member: str) -> str:
    from teams.models import Member

    return member_token_create(member=Member.objects.get(team__name=team, name=member))


async def spawn(api: Api, lead_token: str, team: str, name: str, prompt: str = "") -> str:
    """Spawn a teammate; without a prompt it has no first turn (its inbox starts empty)."""
    await api.ok(lead_token, "spawn_teammate", name=name, description=f"the {name}", prompt=prompt)
    return await token_for(team, name)


def frames_json(frames) -> str:
    return json.dumps(frames, sort_keys=True)
