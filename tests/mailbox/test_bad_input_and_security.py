"""Refusals on the REST tools: always a 4xx with a code, never a 5xx, nothing stored lost."""
import json

import pytest
from channels.db import database_sync_to_async

from mailbox.models import TeamMessage
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

BIG = "x" * (64 * 1024 + 1)

# (tool, raw body or arguments, status, code)
BAD_INPUT = [
    ("send_message", b"{not json", 400, "VALIDATION_ERROR"),
    ("send_message", b"[1, 2]", 400, "VALIDATION_ERROR"),
    ("send_message", b'"a string"', 400, "VALIDATION_ERROR"),
    ("send_message", {"target": "implementer"}, 400, "VALIDATION_ERROR"),
    ("send_message", {"message": "hi"}, 400, "VALIDATION_ERROR"),
    ("send_message", {"target": 7, "message": "hi"}, 400, "VALIDATION_ERROR"),
    ("send_message", {"target": "implementer", "message": ["hi"]}, 400, "VALIDATION_ERROR"),
    ("send_message", {"target": "implementer", "message": "   "}, 400, "VALIDATION_ERROR"),
    ("send_message", {"target": "implementer", "message": BIG}, 413, "TEAM_MESSAGE_TOO_LARGE"),
    ("send_message", {"target": "implementer", "message": "y" * 3_000_000}, 413, "TEAM_MESSAGE_TOO_LARGE"),
    ("send_message", {"target": "implementer", "message": "é" * 40_000}, 413, "TEAM_MESSAGE_TOO_LARGE"),
    ("send_message", {"target": "nobody", "message": "hi"}, 404, "TEAM_UNKNOWN_TARGET"),
    ("send_message", {"target": "Bad Name", "message": "hi"}, 400, "VALIDATION_ERROR"),
    ("send_message", {"target": "retired-one", "message": "hi"}, 409, "TEAM_TARGET_RETIRED"),
    ("send_message", {"target": "lead", "message": "hi me"}, 400, "TEAM_SELF_MESSAGE"),
    ("send_message", {"target": "implementer", "message": "hi", "sender": "implementer"}, 400, "VALIDATION_ERROR"),
    ("no_such_tool", {}, 404, "NOT_FOUND"),
    ("spawn_teammate", {"name": "x"}, 400, "VALIDATION_ERROR"),
    ("spawn_teammate", {"name": "implementer", "description": "again", "prompt": ""}, 409, "TEAM_NAME_TAKEN"),
    ("spawn_teammate", {"name": "UPPER", "description": "", "prompt": ""}, 400, "VALIDATION_ERROR"),
    ("wait_agent", {"timeout_ms": 5}, 400, "VALIDATION_ERROR"),
    ("wait_agent", {"timeout_ms": "soon"}, 400, "VALIDATION_ERROR"),
    ("interrupt_agent", {"target": "nobody"}, 404, "TEAM_UNKNOWN_TARGET"),
    ("team_task_create", {"subject": "", "description": ""}, 400, "VALIDATION_ERROR"),
    ("team_task_create", {"subject": "s", "description": "d", "blocked_by": ["task-99"]}, 404, "TASK_NOT_FOUND"),
    ("team_task_create", {"subject": "s", "description": "", "blocked_by": ["bogus"]}, 400, "VALIDATION_ERROR"),
    ("team_task_create", {"subject": " ", "description": "d"}, 400, "VALIDATION_ERROR"),
    ("team_task_create", {"subject": "s" * 201, "description": "d"}, 400, "VALIDATION_ERROR"),
    ("team_task_create", {"subject": "s", "description": " \n"}, 400, "VALIDATION_ERROR"),
    ("team_task_create", {"subject": "s", "description": "d", "write_scopes": ["a", "a/../b"]}, 400, "VALIDATION_ERROR"),
    ("spawn_teammate", {"name": "helper", "description": " ", "prompt": ""}, 400, "VALIDATION_ERROR"),
    ("team_task_get", {"task_id": "task-99"}, 404, "TASK_NOT_FOUND"),
    ("team_task_get", {"task_id": "task-0"}, 400, "VALIDATION_ERROR"),
    ("team_task_get", {}, 400, "VALIDATION_ERROR"),
    ("team_task_list", {"limit": 0}, 400, "VALIDATION_ERROR"),
    ("team_task_list", {"limit": 101}, 400, "VALIDATION_ERROR"),
    ("team_task_list", {"cursor": "%%%"}, 400, "VALIDATION_ERROR"),
    ("team_task_list", {"status": "done"}, 400, "VALIDATION_ERROR"),
    ("team_task_update", {"task_id": "task-1", "expected_revision": 99, "action": "claim"}, 409, "TASK_REVISION_CONFLICT"),
    ("team_task_update", {"task_id": "task-1", "expected_revision": 1, "action": "fly"}, 400, "VALIDATION_ERROR"),
    ("team_task_update", {"task_id": "task-1", "expected_revision": 1, "action": "complete"}, 409, "TASK_INVALID_ACTION"),
    ("team_task_update", {"task_id": "task-1", "expected_revision": 1, "action": "set_dependencies", "blocked_by": ["task-1"]}, 409, "TASK_DEPENDENCY_CYCLE"),
]


@database_sync_to_async
def retire(team: str, name: str) -> None:
    from teams.models import Member

    Member.objects.filter(team__name=team, name=name).update(phase="retired")


@database_sync_to_async
def stored() -> list[tuple[str, str, str]]:
    return sorted(TeamMessage.objects.values_list("id", "content", "state"))


async def test_every_bad_input_is_a_4xx_with_its_code_and_loses_nothing(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "retired-one")
    await retire("alpha", "retired-one")
    kept = await api.ok(team["lead"], "send_message", target="implementer", message="keep me")
    await api.ok(team["lead"], "team_task_create", subject="t", description="d")
    before = await stored()

    for tool, payload, status, code in BAD_INPUT:
        if isinstance(payload, bytes):
            response = await api.tool(team["lead"], tool, body=payload)
        else:
            response = await api.tool(team["lead"], tool, **payload)
        assert response.status_code == status, (tool, payload if not isinstance(payload, dict) else list(payload), response.text)
        body = response.json()
        assert body["error"]["code"] == code, (tool, body)
        assert body["error"]["message"]
        if tool == "send_message":
            assert body["persisted"] is False

    assert await stored() == before
    assert [m[0] for m in before] == [kept["message_id"]]


async def test_a_full_mailbox_refuses_without_losing_what_it_holds(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_PER_TARGET": 3}
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    for i in range(3):
        assert (await api.ok(team["lead"], "send_message", target="implementer", message=f"m{i}"))["status"] == "queued"
    full = await api.tool(team["lead"], "send_message", target="implementer", message="one too many")
    assert full.status_code == 429
    assert full.json()["error"]["code"] == "TEAM_MAILBOX_FULL" and full.json()["persisted"] is False
    assert [c for _, c, _ in await stored()] == ["m0", "m1", "m2"] or sorted(c for _, c, _ in await stored()) == [
        "m0",
        "m1",
        "m2",
    ]


async def test_tokens_are_required_and_bound_to_their_team(api):
    alpha = await team_new("alpha")
    beta = await team_new("beta")
    await spawn(api, beta["lead"], "beta", "implementer")
    beta_msg = await api.ok(beta["lead"], "send_message", target="implementer", message="beta only")

    for token in (None, "sbm_not-a-token", alpha["host"]):
        response = await api.tool(token, "list_agents")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"

    # Alpha's Lead sees only alpha, and cannot reach beta's members.
    agents = await api.ok(alpha["lead"], "list_agents")
    assert [a["name"] for a in agents["agents"]] == ["lead"]
    response = await api.tool(alpha["lead"], "send_message", target="implementer", message="cross-team")
    assert response.status_code == 404 and response.json()["error"]["code"] == "TEAM_UNKNOWN_TARGET"
    headers = {"Authorization": f"Bearer {alpha['lead']}"}
    assert (await api.http.get("/api/v1/teams/alpha", headers=headers)).status_code == 200
    for path in ("/api/v1/teams/beta", "/api/v1/teams/beta/messages", "/api/v1/teams/beta/prompts"):
        response = await api.http.get(path, headers=headers)
        assert response.status_code == 403, path
        assert beta_msg["message_id"] not in response.text
    # A member token never acts as an operator, even on its own team.
    response = await api.http.post(f"/api/v1/teams/alpha/prompts", json={"target": "lead", "content": "x"}, headers=headers)
    assert response.status_code == 403
    # No websocket without a valid token.
    from channels.testing import WebsocketCommunicator

    from config.asgi import application

    for path, token in (("/ws/agent/", alpha["host"]), ("/ws/host/", alpha["lead"]), ("/ws/agent/", "")):
        comm = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Bearer {token}".encode())])
        connected, _ = await comm.connect()
        assert connected is False
        await comm.disconnect()  # end the refused consumer's channel-layer read
    response = await api.http.get("/api/v1/teams/alpha")
    assert response.status_code == 401 and response.json()["error"]["code"] == "UNAUTHENTICATED"


async def test_teammates_cannot_use_lead_only_tools(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "researcher")
    for tool, args in (
        ("spawn_teammate", {"name": "helper", "description": "", "prompt": ""}),
        ("interrupt_agent", {"target": "researcher"}),
    ):
        response = await api.tool(impl, tool, **args)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "LEAD_ONLY"
    await api.ok(impl, "team_task_create", subject="t", description="d")
    response = await api.tool(
        impl, "team_task_update", task_id="task-1", expected_revision=1, action="reassign", owner="researcher"
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "LEAD_ONLY"


async def test_bad_websocket_frames_get_an_error_frame_and_the_connection_stays(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect(status=None)
    await agent.comm.send_to(text_data="{nope")
    assert (await agent.expect("error"))["error"]["code"] == "VALIDATION_ERROR"
    await agent.send({"type": "status", "status": "running"})
    assert (await agent.expect("error"))["error"]["message"] == "Say hello first."
    await agent.send({"type": "hello", "status": "idle"})
    await agent.expect("welcome")
    for frame in (
        {"type": "warp"},
        {"no": "type"},
        {"type": "status", "status": "asleep"},
        {"type": "entry", "entry": {"kind": "user_message"}},
        {"type": "entry", "entry": {"id": "x", "kind": "user_message", "source": {"kind": "team-message"}}},
        {"type": "entry", "entry": {"id": "y", "kind": "user_message", "source": {"kind": "team-message", "message_id": "team-message-nope"}}},
    ):
        await agent.send(frame)
        error = await agent.expect("error")
        assert error["error"]["code"] in ("VALIDATION_ERROR", "NOT_FOUND"), frame
    await agent.comm.send_to(text_data=json.dumps([1]))
    await agent.expect("error")
    # Still connected and useful.
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="still there?")
    assert (await agent.expect("steer"))["message"]["id"] == sent["message_id"]
    await agent.close()
