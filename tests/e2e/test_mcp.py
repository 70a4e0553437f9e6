"""/mcp with the official `mcp` client, against the application served in-process on a thread of
its own (tests/support/inproc.py): the ten Team tools, their schemas, results and error codes are
REST's, and what is sent over MCP reaches a websocket session."""
import ast
import asyncio
import json
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
import websockets
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from steerboard_protocol.tools import TEAM_TOOLS

from tests.support.wire_agent import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TEN = list(TEAM_TOOLS)  # the wire contract's tools (pinned by tests/mailbox/test_tools_schema.py)


@asynccontextmanager
async def mcp_client(server, token: str, mode: str = "auto"):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
    async with http:
        async with Client(streamable_http_client(server.url + "/mcp", http_client=http), mode=mode) as client:
            yield client


def rest(server, token, tool_name, **arguments) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/v1/tools/{tool_name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


async def recv_type(ws, wanted, timeout=10):
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == wanted:
            return frame


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_mcp_client_lists_exactly_the_ten_tools_with_the_rest_schemas(inproc_env, served_thread, mode):
    team = inproc_env.team_create(f"mcp-tools-{mode}")
    rest_tools = {t["name"]: t for t in httpx.get(served_thread.url + "/api/v1/tools").json()}
    async with mcp_client(served_thread, team["lead"]["token"], mode) as client:
        listed = await client.list_tools()
    assert [t.name for t in listed.tools] == TEN
    for tool in listed.tools:
        assert tool.description == rest_tools[tool.name]["description"]
        assert tool.input_schema == rest_tools[tool.name]["input_schema"]
        assert tool.output_schema == rest_tools[tool.name]["output_schema"]


async def test_a_message_sent_over_mcp_reaches_a_websocket_session(inproc_env, served_thread):
    team = inproc_env.team_create("mcp-ws")
    lead = team["lead"]["token"]
    async with mcp_client(served_thread, lead) as client:
        spawned = await client.call_tool(
            "spawn_teammate", {"name": "implementer", "description": "writes code", "prompt": ""}
        )
        assert not spawned.is_error
        assert spawned.structured_content["member"]["name"] == "implementer"
        impl = inproc_env.manage_json("member_token", "mcp-ws", "implementer")["token"]
        async with websockets.connect(
            served_thread.ws_url + "/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"}
        ) as ws:
            await ws.send(json.dumps({"type": "hello", "status": "idle"}))
            await recv_type(ws, "welcome")
            sent = await client.call_tool(
                "send_message", {"target": "implementer", "message": "Start on task-1.", "idempotency_key": "go-1"}
            )
            assert not sent.is_error, sent.content
            result = sent.structured_content
            assert result["status"] == "accepted"
            assert result["delivery"]["target_status"] == "idle"
            assert json.loads(sent.content[0].text) == result

            steer = await recv_type(ws, "steer")
            assert steer["message"]["id"] == result["message_id"]
            assert steer["message"]["sender"] == "lead"
            assert steer["message"]["content"] == "Start on task-1."
            entry = {
                "id": "e1",
                "kind": "user_message",
                "source": {"kind": "team-message", "message_id": result["message_id"]},
            }
            await ws.send(json.dumps({"type": "entry", "entry": entry}))
            assert (await recv_type(ws, "ack"))["folded"] is False

            # A retry over MCP with the same key replays, exactly as over REST.
            again = await client.call_tool(
                "send_message", {"target": "implementer", "message": "Start on task-1.", "idempotency_key": "go-1"}
            )
            assert again.structured_content["idempotent_replay"] is True
            assert again.structured_content["message_id"] == result["message_id"]
            assert await asyncio.to_thread(lambda: rest(served_thread, lead, "list_agents").status_code) == 200
    op = inproc_env.operator_create("op")
    listing = httpx.get(
        f"{served_thread.url}/api/v1/teams/mcp-ws/messages", headers={"Authorization": f"Token {op['token']}"}
    ).json()
    assert [(m["id"], m["state"]) for m in listing["messages"]] == [(result["message_id"], "delivered")]


async def test_mcp_sees_the_same_error_codes_and_bodies_as_rest(inproc_env, served_thread):
    team = inproc_env.team_create("mcp-codes")
    lead = team["lead"]["token"]
    assert rest(served_thread, lead, "spawn_teammate", name="implementer", description="d", prompt="").status_code == 200
    impl = inproc_env.manage_json("member_token", "mcp-codes", "implementer")["token"]
    assert rest(served_thread, lead, "send_message", target="implementer", message="a", idempotency_key="k").status_code == 200
    cases = [
        (lead, "send_message", {"target": "nobody", "message": "hi"}, "TEAM_UNKNOWN_TARGET"),
        (lead, "send_message", {"target": "lead", "message": "hi"}, "TEAM_SELF_MESSAGE"),
        (lead, "send_message", {"target": "implementer", "message": "hi", "notification_policy": "quiet"}, "VALIDATION_ERROR"),
        (lead, "send_message", {"target": "implementer", "message": "hi", "sender": "implementer"}, "VALIDATION_ERROR"),
        (lead, "send_message", {"target": "implementer", "message": "b", "idempotency_key": "k"}, "IDEMPOTENCY_KEY_CONFLICT"),
        (lead, "send_message", {"target": "implementer", "message": "hi", "reply_to": "team-message-x"}, "NOT_FOUND"),
        (impl, "spawn_teammate", {"name": "another", "description": "d", "prompt": "p"}, "LEAD_ONLY"),
        (lead, "team_task_get", {"task_id": "task-99"}, "TASK_NOT_FOUND"),
        (lead, "team_task_get", {"task_id": "nine"}, "VALIDATION_ERROR"),
        (lead, "wait_agent", {"timeout_ms": 5}, "VALIDATION_ERROR"),
        (lead, "no_such_tool", {}, "NOT_FOUND"),
    ]
    async with mcp_client(served_thread, lead) as lead_client, mcp_client(served_thread, impl) as impl_client:
        for token, name, arguments, code in cases:
            over_rest = await asyncio.to_thread(rest, served_thread, token, name, **arguments)
            assert 400 <= over_rest.status_code < 500, (name, over_rest.text)
            assert over_rest.json()["error"]["code"] == code, (name, over_rest.text)
            client = lead_client if token == lead else impl_client
            over_mcp = await client.call_tool(name, arguments)
            assert over_mcp.is_error, (name, over_mcp)
            # A tool error carries no structuredContent (that is the outputSchema's), but the code, the
            # message and REST's whole body as text.
            assert over_mcp.structured_content is None, name
            error = over_rest.json()["error"]
            assert over_mcp.content[0].text == f"{error['code']}: {error['message']}"
            assert json.loads(over_mcp.content[1].text) == over_rest.json()


async def test_without_a_member_token_mcp_is_unauthenticated(inproc_env, served_thread):
    inproc_env.team_create("mcp-unauth")
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in [{}, {"Authorization": "Bearer sbm_not-a-token"}]:
        response = httpx.post(
            served_thread.url + "/mcp",
            json=initialize,
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="steerboard"')
        # RFC 6750: invalid_token for a token sent, no error code without one; static tokens, no OAuth,
        # so no resource_metadata for a client to start an OAuth flow from.
        assert ('error="invalid_token"' in challenge) == bool(headers)
        assert "resource_metadata" not in challenge
    # Nor any OAuth metadata a client could discover instead (MCP authorization spec, RFC 9728, RFC 8414).
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
                 "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"]:
        assert httpx.get(served_thread.url + path).status_code == 404, path
    # Django's routes are untouched by the mount.
    assert httpx.get(served_thread.url + "/mcpx").status_code == 404
    assert httpx.get(served_thread.url + "/api/v1/tools/policy").status_code == 200


async def test_the_inbox_cursor_over_mcp_takes_each_message_once_and_marks_it_delivered(inproc_env, served_thread):
    team = inproc_env.team_create("mcp-inbox")
    lead = team["lead"]["token"]
    assert rest(served_thread, lead, "spawn_teammate", name="implementer", description="d", prompt="").status_code == 200
    impl = inproc_env.manage_json("member_token", "mcp-inbox", "implementer")["token"]
    sent = [rest(served_thread, lead, "send_message", target="implementer", message=f"m{i}").json() for i in range(3)]
    assert all(s["status"] == "queued" for s in sent)  # nobody to admit them to: they wait

    got, answered, cursor = [], [], 0
    async with mcp_client(served_thread, impl) as client:
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["steerboard://inbox{?after_seq,limit}"]
        while True:
            read = await client.read_resource(f"steerboard://inbox?after_seq={cursor}&limit=2")
            page = json.loads(read.contents[0].text)
            got += [m["id"] for m in page["messages"]]
            answered += page["messages"]
            cursor = page["last_seq"]
            if page["next_cursor"] is None:
                break
        again = json.loads((await client.read_resource(f"steerboard://inbox?after_seq={cursor}")).contents[0].text)
        assert again["messages"] == []
        policy = await client.read_resource("steerboard://policy")
        assert "never resend" in policy.contents[0].text
    assert got == [s["message_id"] for s in sent]
    op = inproc_env.operator_create("op")
    listing = httpx.get(
        f"{served_thread.url}/api/v1/teams/mcp-inbox/messages", headers={"Authorization": f"Token {op['token']}"}
    ).json()
    assert {m["state"] for m in listing["messages"]} == {"delivered"}
    # The inbox answers them as they are now, as REST does (issue 33 item 5): delivered, with
    # their times, and no current error, though each waited for a host before (its trace keeps that).
    rows = {m["id"]: m for m in listing["messages"]}
    for message in answered:
        assert message["state"] == "delivered" and message["last_error"] == "", message
        assert message["accepted_at"] and message["delivered_at"], message
        assert {k: message[k] for k in ("accepted_at", "delivered_at")} == {
            k: rows[message["id"]][k] for k in ("accepted_at", "delivered_at")}
        assert rows[message["id"]]["last_error"] == ""
    polled = httpx.get(f"{served_thread.url}/api/v1/inbox", headers={"Authorization": f"Bearer {impl}"}).json()
    assert [m["last_error"] for m in polled["messages"]] == ["", "", ""]
    trace = httpx.get(
        f"{served_thread.url}/api/v1/teams/mcp-inbox/messages/{sent[0]['message_id']}",
        headers={"Authorization": f"Token {op['token']}"},
    ).json()
    kinds = [e["kind"] for e in trace["events"]]
    assert kinds[:2] == ["queued", "failed"] and "no host" in trace["events"][1]["error"], trace["events"]
    assert kinds[-1] == "delivered" and trace["last_error"] == ""


async def test_wait_agent_over_mcp_returns_when_mail_reaches_the_caller(inproc_env, served_thread, settings,
                                                                        monkeypatch):
    from mailbox import selectors

    settings.STEERBOARD = {**settings.STEERBOARD, "WAIT_RECHECK_INTERVAL": 0.2}
    reads = []  # the wait's reads of what it compares with (it reads again at each recheck)
    real = selectors.wait_snapshot
    monkeypatch.setattr(selectors, "wait_snapshot", lambda member: reads.append(1) or real(member))
    team = inproc_env.team_create("mcp-wait")
    lead = team["lead"]["token"]
    assert rest(served_thread, lead, "spawn_teammate", name="implementer", description="d", prompt="").status_code == 200
    impl = inproc_env.manage_json("member_token", "mcp-wait", "implementer")["token"]
    async with websockets.connect(
        served_thread.ws_url + "/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"}
    ) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "running"}))
        await recv_type(ws, "welcome")
        async with mcp_client(served_thread, lead) as client:
            waiting = asyncio.create_task(client.call_tool("wait_agent", {"timeout_ms": 60_000}))
            # Compared, then compared again at a recheck: it goes on waiting while nothing changes.
            await wait_until(lambda: len(reads) >= 2 or waiting.done(), timeout=30, what="the wait's recheck")
            assert not waiting.done()
            reply = await asyncio.to_thread(rest, served_thread, impl, "send_message", target="lead", message="done")
            assert reply.status_code == 200
            woke = await asyncio.wait_for(waiting, 30)
    assert not woke.is_error
    assert woke.structured_content == {"timed_out": False, "no_progress": None}


async def test_bad_input_over_mcp_is_a_4xx_or_an_mcp_error_never_a_5xx(inproc_env, served_thread, caplog):
    team = inproc_env.team_create("mcp-bad")
    headers = {
        "Authorization": f"Bearer {team['lead']['token']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    url = served_thread.url + "/mcp"
    for method in ["GET", "DELETE", "PUT"]:
        response = httpx.request(method, url, headers=headers, timeout=10)
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert httpx.post(url, headers=headers, content=b"garbage").status_code == 400
    assert httpx.post(url, headers=headers, content=b"[]").status_code == 400
    wrong_host = httpx.post(url, headers={**headers, "Host": "evil.example"}, json={})
    assert wrong_host.status_code == 400
    calls = [
        {"method": "tools/call", "params": {"name": "send_message", "arguments": [1]}},
        {"method": "resources/read", "params": {"uri": "steerboard://inbox?limit=abc"}},
        {"method": "resources/read", "params": {"uri": "steerboard://nope"}},
        {"method": "no/such/method", "params": {}},
    ]
    for call in calls:
        response = httpx.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, **call}, timeout=10)
        assert response.status_code < 500, (call, response.text)
        assert '"error"' in response.text, (call, response.text)
    assert served_thread.server_errors() == []
    assert not [r.getMessage() for r in caplog.records if r.exc_info], "no traceback logged"


async def test_the_python_example_of_docs_mcp_md_runs_as_written(inproc_env, served_thread, capsys):
    team = inproc_env.team_create("mcp-docs")
    lead = team["lead"]["token"]
    assert rest(served_thread, lead, "spawn_teammate", name="implementer", description="d", prompt="").status_code == 200
    impl = inproc_env.manage_json("member_token", "mcp-docs", "implementer")["token"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    example = docs.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = {"__name__": "docs_mcp_example"}  # not __main__: the test calls main with its own server
    exec(compile(example, "docs/mcp.md", "exec"), namespace)
    await namespace["main"](served_thread.url + "/mcp", impl)
    listed, sent, refused = capsys.readouterr().out.splitlines()
    assert ast.literal_eval(listed) == TEN
    sent = ast.literal_eval(sent)
    assert sent["status"] == "queued" and sent["idempotent_replay"] is False  # the Lead has no session
    assert refused.startswith("True TEAM_UNKNOWN_TARGET: No member named 'nobody'")
