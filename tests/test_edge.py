"""The edge (mailbox/transports/edge.py, issue 30 item 2): one gate in front of every transport, on the
real ASGI application. A Host that ALLOWED_HOSTS does not admit gets one code everywhere; a
refused send_message says ``persisted: false`` alike over REST, the websocket and /mcp (the
tool declares it, mailbox/transports/tools.py); /mcp serves the member the edge found (and a revoked
token is still refused); the process's sweeper is started by the edge, once a request got
through."""
import json

import httpx
import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from mailbox.members import lifecycle
from mailbox.operations import sweeper
from mailbox.plumbing import auth
from mailbox.transports import edge
from mailbox.transports.mcp_server import mcp_app
from teams.models import Member
from tests.support.inproc import Agent, Api, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

BAD_HOST = "evil.example"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _client(host: str = "testserver", app=application) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def _socket_refusal(path: str, headers: list) -> tuple[dict, int]:
    """The error frame a websocket is accepted only to carry, and the code it is closed with."""
    socket = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await socket.connect()
    assert connected, path
    frame = await socket.receive_json_from(timeout=5)
    closed = await socket.receive_output(timeout=5)
    assert closed["type"] == "websocket.close", closed
    await socket.wait()
    return frame, closed["code"]


async def test_a_host_that_is_not_allowed_gets_the_same_code_on_every_surface():
    team = await team_new()
    lead = team["lead"]
    expected = edge.host_refused().as_wire()
    assert expected["error"]["code"] == "VALIDATION_ERROR"
    async with _client(BAD_HOST) as client:
        answers = {
            "REST tool call": await client.post("/api/v1/tools/list_agents", json={}, headers=_bearer(lead)),
            "REST inbox": await client.get("/api/v1/inbox", headers=_bearer(lead)),
            "operator REST": await client.get("/api/v1/teams", headers=_bearer(lead)),
            "a dashboard page": await client.get("/login/"),
            "/mcp": await client.post(
                "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={**MCP_HEADERS, **_bearer(lead)}
            ),
            "/a2a": await client.post(
                "/a2a/alpha/lead/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}},
                headers=_bearer(lead),
            ),
        }
    for surface, response in answers.items():
        assert (response.status_code, response.json()) == (400, expected), surface
    host = [(b"host", BAD_HOST.encode())]
    for path, credential in [("/ws/agent/", lead), ("/ws/host/", team["host"]), ("/ws/dashboard/", None)]:
        headers = host + ([(b"authorization", f"Bearer {credential}".encode())] if credential else [])
        frame, code = await _socket_refusal(path, headers)
        assert (frame, code) == ({"type": "error", **expected}, edge.CLOSE_BAD_REQUEST), path
    # The same requests with an allowed Host are served.
    async with _client() as client:
        assert (await client.post("/api/v1/tools/list_agents", json={}, headers=_bearer(lead))).status_code == 200
    agent = Agent(lead)
    assert (await agent.connect())["member"] == "lead"
    await agent.close()


async def _mcp_refusal(client: httpx.AsyncClient, token: str, tool: str, arguments: dict) -> dict:
    """A refused MCP tool call's REST error body (its second text block)."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    response = await client.post("/mcp", json=call, headers={**MCP_HEADERS, **_bearer(token)})
    assert response.status_code == 200, response.text
    data = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    result = json.loads(data[-1])["result"]
    assert result["isError"] is True, result
    return json.loads(result["content"][1]["text"])


async def _ws_refusal(agent: Agent, call_id: str, tool: str, arguments: dict) -> dict:
    await agent.send({"type": "tool", "id": call_id, "name": tool, "arguments": arguments})
    frame = await agent.expect("tool_result")
    assert frame["id"] == call_id and "result" not in frame, frame
    return {k: v for k, v in frame.items() if k not in ("type", "id")}


async def test_a_refused_send_says_persisted_false_the_same_on_every_transport():
    team = await team_new()
    lead = team["lead"]
    api = Api()
    await spawn(api, lead, "alpha", "impl")
    await api.ok(lead, "send_message", target="impl", message="first", idempotency_key="k-1")
    refusals = {
        "a sender field": ("send_message", {"target": "impl", "message": "x", "sender": "impl"}),
        "a delivery choice": ("send_message", {"target": "impl", "message": "x", "quiet": True}),
        "no such target": ("send_message", {"target": "nobody", "message": "x"}),
        "the key used for another send": ("send_message", {"target": "impl", "message": "other", "idempotency_key": "k-1"}),
        "a NUL in the message": ("send_message", {"target": "impl", "message": "a\x00b"}),
        "another tool's refusal": ("team_task_get", {"task_id": "no-such-task"}),
    }
    agent = Agent(lead)
    await agent.connect()
    async with _client() as client:
        for n, (case, (tool, arguments)) in enumerate(refusals.items()):
            rest = await api.tool(lead, tool, **arguments)
            assert 400 <= rest.status_code < 500, (case, rest.text)
            bodies = {
                "rest": rest.json(),
                "websocket": await _ws_refusal(agent, f"call-{n}", tool, arguments),
                "mcp": await _mcp_refusal(client, lead, tool, arguments),
            }
            codes = {transport: body["error"]["code"] for transport, body in bodies.items()}
            assert len(set(codes.values())) == 1, (case, codes)
            persisted = {transport: body.get("persisted", "absent") for transport, body in bodies.items()}
            if tool == "send_message":
                assert set(persisted.values()) == {False}, (case, persisted)
            else:
                assert set(persisted.values()) == {"absent"}, (case, persisted)
            if case != "a NUL in the message":  # each transport names where it found the NUL
                assert bodies["rest"] == bodies["websocket"] == bodies["mcp"], (case, bodies)
        # Refused at the edge, before any body is read: the tool's extras all the same.
        unauthenticated = await client.post("/api/v1/tools/send_message", json={"target": "impl", "message": "x"})
        assert unauthenticated.status_code == 401
        assert unauthenticated.json()["persisted"] is False
    await agent.close()
    await api.close()


async def test_mcp_serves_the_member_the_edge_found_and_looks_no_token_up_again(monkeypatch):
    team = await team_new()
    lead = await database_sync_to_async(Member.objects.select_related("team").get)(team__name="alpha", name="lead")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_agents", "arguments": {}}}

    async def member_in_scope(scope, receive, send):  # what the edge leaves, and no Authorization header
        await mcp_app({**scope, edge.MEMBER_KEY: lead}, receive, send)

    async with _client(app=member_in_scope) as client:
        served = await client.post("/mcp", json=call, headers=MCP_HEADERS)
    assert served.status_code == 200 and '"lead"' in served.text, served.text

    lookups = []
    real = auth.member_of_request

    async def counted(headers):
        lookups.append(1)
        return await real(headers)

    monkeypatch.setattr(auth, "member_of_request", counted)
    async with _client() as client:
        answered = await client.post("/mcp", json=call, headers={**MCP_HEADERS, **_bearer(team["lead"])})
    assert answered.status_code == 200 and '"isError":false' in answered.text.replace(" ", ""), answered.text
    assert len(lookups) == 1  # the edge's; /mcp read it from the scope


async def test_a_revoked_token_is_refused_on_mcp_at_once():
    team = await team_new()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {**MCP_HEADERS, **_bearer(team["lead"])}
    async with _client() as client:
        assert (await client.post("/mcp", json=call, headers=headers)).status_code == 200  # now cached
        revoked = await database_sync_to_async(lifecycle.member_tokens_revoke)(team_id=team["team"].pk, name="lead")
        assert revoked == 1
        refused = await client.post("/mcp", json=call, headers=headers)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "UNAUTHENTICATED"
    assert refused.headers["www-authenticate"].startswith('Bearer realm="steerboard", error="invalid_token"')


async def test_the_edge_starts_the_process_once_a_request_got_through(monkeypatch):
    started = []
    monkeypatch.setattr(sweeper, "ensure_started", lambda: started.append(1))
    team = await team_new()
    async with _client(BAD_HOST) as client:
        await client.get("/login/")
    assert started == []  # refused at the Host: nothing of the process runs for it
    async with _client() as client:
        for probe in edge.PROBES:  # a load balancer's probe observes the process, it does not set it to work
            await client.get(probe)
        assert started == []
        await client.post("/api/v1/tools/list_agents", json={}, headers=_bearer(team["lead"]))
        await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                          headers={**MCP_HEADERS, **_bearer(team["lead"])})
        await client.get("/a2a/alpha/.well-known/agent-card.json")
        await client.get("/login/")
    agent = Agent(team["lead"])
    await agent.connect()
    await agent.close()
    assert len(started) == 5  # each request once, at the edge: no transport starts it again
