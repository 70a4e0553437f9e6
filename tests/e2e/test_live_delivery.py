"""End to end with the `websockets` client, against the application served in-process
(tests/support/inproc.py: a real socket, the test database and channel layer)."""
import asyncio
import json

import httpx
import pytest
import websockets

from tests.support.wire_agent import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def tool(server, token, tool_name, **arguments):
    return httpx.post(
        f"{server.url}/api/v1/tools/{tool_name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


_held: dict[int, list[dict]] = {}


async def recv_type(ws, wanted, timeout=10):
    """The next frame of one type; frames of other types are held for later calls."""
    held = _held.setdefault(id(ws), [])
    for i, frame in enumerate(held):
        if frame["type"] == wanted:
            return held.pop(i)
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == wanted:
            return frame
        held.append(frame)


async def test_idle_target_gets_steer_and_entry_marks_delivered(inproc_env, served):
    team = inproc_env.team_create("e2e")
    lead = team["lead"]["token"]
    assert (await asyncio.to_thread(tool, served, lead, "spawn_teammate", name="implementer", description="d",
                                    prompt="")).status_code == 200
    impl = inproc_env.manage_json("member_token", "e2e", "implementer")["token"]
    async with websockets.connect(
        served.ws_url + "/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"}
    ) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "idle"}))
        await recv_type(ws, "welcome")
        sent = await asyncio.to_thread(tool, served, lead, "send_message", target="implementer", message="go")
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
    op = inproc_env.operator_create("op")
    listing = (await asyncio.to_thread(
        httpx.get, f"{served.url}/api/v1/teams/e2e/messages", headers={"Authorization": f"Token {op['token']}"}
    )).json()
    assert [m["state"] for m in listing["messages"]] == ["delivered"]


async def connect(server, token, path="/ws/agent/"):
    return await websockets.connect(server.ws_url + path, additional_headers={"Authorization": f"Bearer {token}"})


async def integrate(ws, message, entry_id):
    entry = {
        "id": entry_id,
        "kind": "user_message",
        "text": message["content"],
        "source": {"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
    }
    await ws.send(json.dumps({"type": "entry", "entry": entry}))
    return await recv_type(ws, "ack")


async def test_without_a_host_a_send_is_queued_and_delivered_once_the_session_says_hello(inproc_env, served):
    team = inproc_env.team_create("cold")
    lead = team["lead"]["token"]
    await asyncio.to_thread(tool, served, lead, "spawn_teammate", name="implementer", description="d", prompt="")
    sent = [
        (await asyncio.to_thread(tool, served, lead, "send_message", target="implementer", message=f"m{i}")).json()
        for i in range(3)
    ]
    assert [s["status"] for s in sent] == ["queued"] * 3

    impl = inproc_env.manage_json("member_token", "cold", "implementer")["token"]
    async with await connect(served, impl) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "idle"}))
        assert (await recv_type(ws, "welcome"))["replay"] == 3
        got = [(await recv_type(ws, "steer"))["message"] for _ in range(3)]
        assert [m["id"] for m in got] == [s["message_id"] for s in sent]
        for i, message in enumerate(got):
            await integrate(ws, message, f"e{i}")
    op = inproc_env.operator_create("op")
    states = (await asyncio.to_thread(
        httpx.get, f"{served.url}/api/v1/teams/cold", headers={"Authorization": f"Token {op['token']}"}
    )).json()["members"]
    assert next(m for m in states if m["name"] == "implementer")[
        "delivered"
    ] == 3


async def test_the_host_is_asked_to_provision_and_resume_over_its_websocket(inproc_env, served):
    team = inproc_env.team_create("hosted")
    lead = team["lead"]["token"]
    async with await connect(served, team["host_token"], "/ws/host/") as host:
        await asyncio.to_thread(tool, served, lead, "spawn_teammate", name="researcher", description="d", prompt="")
        start = await recv_type(host, "start")
        assert (start["member"], start["reason"]) == ("researcher", "provision")
        async with await connect(served, start["token"]) as ws:
            await ws.send(json.dumps({"type": "hello", "status": "idle"}))
            await recv_type(ws, "welcome")
        await host.send(json.dumps({"type": "started", "member": "researcher"}))
        # Cold-resume needs the member inactive: wait until the server has processed the goodbye.
        await wait_until(lambda: inproc_env.query(
            "SELECT session_state FROM teams_member m JOIN teams_team t ON t.id = m.team_id"
            " WHERE t.name = 'hosted' AND m.name = 'researcher'") == [("inactive",)],
            timeout=30, what="researcher inactive after its session closed")
        sent = (await asyncio.to_thread(tool, served, lead, "send_message", target="researcher", message="hi")).json()
        assert sent["status"] == "accepted"
        # A provision start re-sent before the first session said hello (its start went stale, after
        # REDELIVER_AFTER, on a loaded machine) may still be in the host's socket: skip those.
        resume = await recv_type(host, "start")
        while resume["reason"] == "provision":
            resume = await recv_type(host, "start")
        assert (resume["member"], resume["reason"]) == ("researcher", "resume")
        async with await connect(served, resume["token"]) as ws:
            await ws.send(json.dumps({"type": "hello", "status": "idle"}))
            message = (await recv_type(ws, "steer"))["message"]
            assert message["id"] == sent["message_id"]
            assert (await integrate(ws, message, "r1"))["folded"] is False


async def test_concurrent_senders_over_http_reach_one_target_in_order(inproc_env, served):
    import concurrent.futures

    team = inproc_env.team_create("order")
    lead = team["lead"]["token"]
    names = ["implementer", "researcher", "reviewer"]
    for name in names:
        await asyncio.to_thread(tool, served, lead, "spawn_teammate", name=name, description="d", prompt="")
    tokens = {"lead": lead} | {n: inproc_env.manage_json("member_token", "order", n)["token"] for n in names[1:]}
    impl = inproc_env.manage_json("member_token", "order", "implementer")["token"]

    def burst(name):
        return [
            tool(served, tokens[name], "send_message", target="implementer", message=f"{name} {i}").json()
            for i in range(8)
        ]

    async with await connect(served, impl) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "running"}))
        await recv_type(ws, "welcome")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = await asyncio.gather(*(asyncio.wrap_future(pool.submit(burst, n)) for n in tokens))
        assert all(r["status"] == "accepted" for batch in results for r in batch)
        seen = {}
        while len(seen) < 24:
            message = (await recv_type(ws, "steer"))["message"]
            if message["id"] not in seen:  # a recovery doorbell may repeat one; the session folds it
                seen[message["id"]] = message
                await integrate(ws, message, message["id"])
    got = list(seen.values())
    assert [m["seq"] for m in got] == list(range(1, 25))
    for name in tokens:
        assert [m["content"] for m in got if m["sender"] == name] == [f"{name} {i}" for i in range(8)]
