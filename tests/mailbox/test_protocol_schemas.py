"""GET /api/v1/protocol/frames.json: the websocket frames' JSON Schema (docs/protocol.md).

The served document is the one generated from mailbox/plumbing/wire.py's models, and the
frames a real session gets from the server (in process: the real ASGI app, the
test database and the channel layer) validate against it, each way.
"""
import json

import jsonschema
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User

from mailbox.plumbing import wire
from tests.support.inproc import Agent, operator_token, team_new, token_for

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/v1/protocol/frames.json"


def validator(document: dict, socket: str, side: str) -> jsonschema.Draft202012Validator:
    schema = {**document, "$ref": document["sockets"][socket][side]["$ref"]}
    return jsonschema.Draft202012Validator(schema)


async def served(api) -> dict:
    response = await api.http.get(URL)  # no credentials: the protocol is public
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/schema+json"
    assert response.headers["cache-control"] == "public, max-age=3600"
    return response.json()


async def test_the_served_schemas_are_the_models(api):
    document = await served(api)
    jsonschema.Draft202012Validator.check_schema(document)
    assert document == json.loads(json.dumps(wire.frame_schemas()))
    for socket, (path, client, server) in wire.FRAMES.items():
        assert document["sockets"][socket]["path"] == path
        for side, models in (("client", client), ("server", server)):
            union = document["$defs"][document["sockets"][socket][side]["$ref"].rsplit("/", 1)[1]]
            assert [ref["$ref"] for ref in union["oneOf"]] == [f"#/$defs/{m.__name__}" for m in models]
            for model in models:
                own = model.model_json_schema(ref_template="#/$defs/{model}")
                own.pop("$defs", None)
                assert document["$defs"][model.__name__] == own
    # What the server accepts from an agent is what the schema says it accepts.
    agent_client = validator(document, "agent", "client")
    assert agent_client.is_valid({"type": "hello", "status": "running"})
    assert not agent_client.is_valid({"type": "hello", "status": "busy"})
    assert not agent_client.is_valid({"type": "status", "status": "idle", "sender": "lead"})
    assert not validator(document, "agent", "server").is_valid({"type": "steer", "message": {"id": "m"}})


async def test_the_schemas_are_cacheable_and_read_only(api):
    first = await api.http.get(URL)
    etag = first.headers["etag"]
    again = await api.http.get(URL, headers={"If-None-Match": etag})
    assert again.status_code == 304
    refused = await api.http.post(URL, json={})
    assert refused.status_code == 405
    assert refused.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


async def test_frames_the_server_sends_validate_against_the_schemas(api):
    document = await served(api)
    agent_server, host_server = validator(document, "agent", "server"), validator(document, "host", "server")
    agent_client, host_client = validator(document, "agent", "client"), validator(document, "host", "client")
    seen: dict[str, list[dict]] = {}

    def check(frame: dict, schema=agent_server, socket="agent") -> dict:
        errors = [e.message for e in schema.iter_errors(frame)]
        assert not errors, (frame, errors)
        wire.SERVER_FRAME[socket].validate_python(frame)  # and the models take it
        seen.setdefault(frame["type"], []).append(frame)
        return frame

    team = await team_new()
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)

    # The spawn prompt: a start for the host, then the teammate's first steer.
    await api.ok(team["lead"], "spawn_teammate", name="impl", description="the impl", prompt="Build it.")
    start = check(await host.expect("start"), host_server, "host")
    assert start["reason"] == "provision" and start["member"] == "impl"
    started = {"type": "started", "member": "impl"}
    assert host_client.is_valid(started)
    await host.send(started)
    await host.send({"type": "started"})  # refused: no member
    check(await host.expect("error"), host_server, "host")

    impl = Agent(start["token"])
    welcome = check(await impl.connect("idle"))
    assert welcome["replay"] == 1
    first = check(await impl.expect("steer"))
    assert first["message"]["kind"] == "spawn_prompt"
    ack = check(await impl.integrate(first["message"], entry_id="msg-1"))
    assert ack["folded"] is False
    assert check(await impl.integrate(first["message"], entry_id="msg-1"))["folded"] is True

    sent = await api.ok(team["lead"], "send_message", target="impl", message="task-1 is yours")
    steer = check(await impl.expect("steer"))
    assert steer["message"]["id"] == sent["message_id"] and steer["message"]["kind"] == "message"

    call = {"type": "tool", "id": "call-1", "name": "list_agents", "arguments": {}}
    assert agent_client.is_valid(call)
    await impl.send(call)
    assert check(await impl.expect("tool_result"))["result"]["agents"]
    await impl.send({"type": "tool", "id": "call-2", "name": "send_message", "arguments": {"target": "nobody", "message": "hi"}})
    refused = check(await impl.expect("tool_result"))
    assert refused["error"]["code"] == "TEAM_UNKNOWN_TARGET" and refused["persisted"] is False

    await impl.send({"type": "status", "status": "sleeping"})
    assert check(await impl.expect("error"))["error"]["code"] == "VALIDATION_ERROR"
    await impl.comm.send_to(text_data="{not json")
    check(await impl.expect("error"))

    # A human prompt while idle, then an interrupt while running.
    token = await operator_token()
    response = await api.http.post(
        "/api/v1/teams/alpha/prompts", json={"target": "impl", "content": "summarise"},
        headers={"Authorization": f"Token {token}"},
    )
    assert response.status_code == 201, response.text
    check(await impl.expect("prompt"))
    await impl.status("running")
    await api.ok(team["lead"], "interrupt_agent", target="impl")
    check(await impl.expect("interrupt"))

    # A second session of the same member: hello replays nothing undelivered twice.
    await impl.close()
    again = Agent(await token_for("alpha", "impl"))
    replayed = check(await again.connect("idle"))
    assert replayed["replay"] == 1  # "task-1 is yours" was never reported
    check(await again.expect("steer"))
    await again.close()
    await host.close()

    assert set(seen) == {"start", "error", "welcome", "steer", "ack", "tool_result", "prompt", "interrupt"}


@database_sync_to_async
def browser_session() -> str:
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_user("viewer", password="pw"))
    return client.cookies["sessionid"].value


async def test_dashboard_frames_validate_against_the_schemas(api):
    from channels.testing import WebsocketCommunicator

    from config.asgi import application

    document = await served(api)
    server_frames, client_frames = validator(document, "dashboard", "server"), validator(document, "dashboard", "client")
    team = await team_new()
    session = await browser_session()
    socket = WebsocketCommunicator(
        application, "/ws/dashboard/alpha/",
        headers=[(b"host", b"testserver"), (b"origin", b"http://testserver"), (b"cookie", f"sessionid={session}".encode())],
    )
    connected, _ = await socket.connect()
    assert connected

    def check(frame: dict) -> dict:
        errors = [e.message for e in server_frames.iter_errors(frame)]
        assert not errors, (frame, errors)
        wire.SERVER_FRAME["dashboard"].validate_python(frame)
        return frame

    assert check(await socket.receive_json_from(timeout=5)) == {"type": "subscribed", "team": "alpha"}
    await api.ok(team["lead"], "spawn_teammate", name="impl", description="the impl", prompt="")
    assert check(await socket.receive_json_from(timeout=5))["type"] == "team.changed"
    assert client_frames.is_valid({"type": "ping"})
    await socket.send_json_to({"type": "ping"})
    frame = check(await socket.receive_json_from(timeout=5))
    while frame["type"] == "team.changed":
        frame = check(await socket.receive_json_from(timeout=5))
    assert frame == {"type": "pong"}
    await socket.send_json_to({"type": "subscribe"})
    frame = check(await socket.receive_json_from(timeout=5))
    while frame["type"] == "team.changed":  # a late doorbell of the spawn
        frame = check(await socket.receive_json_from(timeout=5))
    assert frame["type"] == "error" and frame["error"]["code"] == "VALIDATION_ERROR"
    await socket.disconnect()
