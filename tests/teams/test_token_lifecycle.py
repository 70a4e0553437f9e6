"""Member tokens have a lifecycle (issue 12, item 11): a start token is revoked when
the member's next start supersedes it (100 host reconnects leave one live token),
operators revoke a member's tokens by REST or command, and a retired member's
tokens stop working at once in this process (the token cache is invalidated)."""
import asyncio
import json
from io import StringIO

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from teams.models import Member, MemberToken, Task, TokenKind
from tests.support.inproc import Agent, person, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_sweeper(settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "SWEEP_INTERVAL": 0}


@database_sync_to_async
def _start_tokens(name: str) -> int:
    return MemberToken.objects.filter(member__name=name, kind=TokenKind.START).count()


async def _works(api, token: str) -> int:
    return (await api.tool(token, "list_agents")).status_code


async def test_a_hundred_host_reconnects_leave_one_live_start_token(api):
    team = await team_new("alpha")
    await api.ok(team["lead"], "spawn_teammate", name="impl", description="the impl", prompt="go")
    tokens = []
    for _ in range(100):
        host = Agent(team["host"], path="/ws/host/")
        await host.connect(status=None)
        start = await host.expect("start")
        assert start["member"] == "impl"
        tokens.append(start["token"])
        if len(tokens) == 1:
            assert await _works(api, tokens[0]) == 200  # now in this process's token cache
        await host.close()
    assert len(set(tokens)) == 100
    assert await _start_tokens("impl") == 1
    assert await _works(api, tokens[-1]) == 200
    # Superseded, even the one that was cached a moment ago: refused at once.
    for old in (tokens[0], tokens[50], tokens[-2]):
        assert await _works(api, old) == 401
    refused = Agent(tokens[0])
    connected, code = await refused.comm.connect()
    assert not connected and code == 4401


async def test_operators_revoke_a_members_tokens_by_rest_and_by_command(api):
    team = await team_new("alpha")
    impl = await spawn(api, team["lead"], "alpha", "impl")
    assert await _works(api, impl) == 200  # cached
    viewer = await person("viewer", operator=False)
    response = await api.http.post("/api/v1/teams/alpha/members/impl/tokens/revoke", headers=viewer)
    assert response.status_code == 403
    assert await _works(api, impl) == 200

    operator = await person("op")
    response = await api.http.post("/api/v1/teams/alpha/members/impl/tokens/revoke", headers=operator)
    assert response.status_code == 200 and response.json() == {"member": "impl", "revoked": 1}
    assert await _works(api, impl) == 401
    response = await api.http.post("/api/v1/teams/alpha/members/nobody/tokens/revoke", headers=operator)
    assert response.status_code == 404 and response.json()["error"]["code"] == "TEAM_UNKNOWN_TARGET"

    # The command: a new token works until revoked; the Lead's own token is untouched.
    out = StringIO()
    await database_sync_to_async(call_command)("member_token", "alpha", "impl", "--json", stdout=out)
    fresh = json.loads(out.getvalue())["token"]
    assert await _works(api, fresh) == 200
    out = StringIO()
    await database_sync_to_async(call_command)("member_token", "alpha", "impl", "--revoke", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"member": "impl", "revoked": 1}
    assert await _works(api, fresh) == 401
    assert await _works(api, team["lead"]) == 200


async def test_a_retired_member_has_no_working_token_no_session_no_messages_and_no_tasks(api):
    team = await team_new("alpha")
    impl = await spawn(api, team["lead"], "alpha", "impl")
    session = Agent(impl)
    await session.connect("idle")
    # An open task it owns (made directly: the board's tool arguments are not what this test is about).
    await database_sync_to_async(
        lambda: Task.objects.create(
            team_id=Member.objects.get(name="impl").team_id, number=1, subject="s", status="in_progress",
            owner=Member.objects.get(name="impl"),
        )
    )()
    operator = await person("op")

    response = await api.http.post("/api/v1/teams/alpha/members/impl/retire", headers=operator)
    assert response.status_code == 200, response.text
    assert response.json() == {"member": "impl", "status": "retired", "revoked": 1}

    # Its open socket is told to reconnect, and its token no longer gets in.
    closed = await session.comm.receive_output(timeout=5)
    assert closed["type"] == "websocket.close"
    assert await _works(api, impl) == 401
    again = Agent(impl)
    assert (await again.comm.connect()) == (False, 4401)

    agents = {a["name"]: a["status"] for a in (await api.ok(team["lead"], "list_agents"))["agents"]}
    assert agents["impl"] == "retired"
    refused = await api.tool(team["lead"], "send_message", target="impl", message="still there?")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "TEAM_TARGET_RETIRED"
    assert await database_sync_to_async(lambda: Task.objects.get().owner_id)() is None
    assert await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)() == ""

    # The command: a no-op on a retired member; the Lead cannot be retired.
    out = StringIO()
    await database_sync_to_async(call_command)("member_retire", "alpha", "impl", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"member": "impl", "status": "retired", "revoked": 0}
    response = await api.http.post("/api/v1/teams/alpha/members/lead/retire", headers=operator)
    assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert await _works(api, team["lead"]) == 200
    await asyncio.sleep(0)
