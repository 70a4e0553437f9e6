"""End to end against a real daphne process with the `websockets` client."""
import asyncio
import json

import httpx
import pytest
import websockets

pytestmark = pytest.mark.e2e


def tool(server, token, tool_name, **arguments):
    return httpx.post(
        f"{server.url}/api/v1/tools/{tool_name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


async def recv_type(ws, wanted, timeout=10):
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == wanted:
            return frame


async def test_idle_target_gets_steer_and_entry_marks_delivered(live_env, daphne_server):
    team = live_env.team_create("e2e")
    lead = team["lead"]["token"]
    assert tool(daphne_server, lead, "spawn_teammate", name="implementer", description="d", prompt="p").status_code == 200
    impl = live_env.manage_json("member_token", "e2e", "implementer")["token"]
    async with websockets.connect(
        daphne_server.ws_url + "/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"}
    ) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "idle"}))
        await recv_type(ws, "welcome")
        sent = await asyncio.to_thread(tool, daphne_server, lead, "send_message", target="implementer", message="go")
        assert sent.json()["status"] == "accepted"
        steer = await recv_type(ws, "steer")
        assert steer["message"]["id"] == sent.json()["message_id"]
        assert steer["message"]["sender"] == "lead"
        entry = {
            "id": "e1",
            "kind": "user_message",
            "text": "go",
            "source": {"kind": "team-message", "message_id": steer["message"]["id"]},
        }
        await ws.send(json.dumps({"type": "entry", "entry": entry}))
        ack = await recv_type(ws, "ack")
        assert ack == {"type": "ack", "entry_id": "e1", "folded": False}
    op = live_env.operator_create("op")
    listing = httpx.get(
        f"{daphne_server.url}/api/v1/teams/e2e/messages", headers={"Authorization": f"Token {op['token']}"}
    ).json()
    assert [m["state"] for m in listing["messages"]] == ["delivered"]
