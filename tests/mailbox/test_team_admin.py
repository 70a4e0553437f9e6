"""Operators make teams and rotate their host tokens over the operator REST API (issue 33
item 10; mailbox/transports/api/operators.py, mailbox/members/lifecycle.team_host_token_rotate): the tokens
are answered once, as `manage.py team_create` prints them; viewers and member tokens get 403."""
import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from mailbox.models import HostPresence
from teams.models import Team
from tests.support.inproc import Agent, auth, person, team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def host_refused(token: str) -> bool:
    comm = WebsocketCommunicator(application, "/ws/host/", headers=auth(token))
    connected, code = await comm.connect()
    await comm.disconnect()
    return connected is False and code == 4401


async def host_recorded() -> None:
    for _ in range(100):  # the host is recorded just after its websocket is accepted
        if await database_sync_to_async(HostPresence.objects.exists)():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the host was never recorded")


async def test_an_operator_creates_a_team_and_its_tokens_work_once_shown(api):
    ops = await person("ops", operator=True)
    made = await api.http.post("/api/v1/teams", json={"name": "crew"}, headers=ops)
    assert made.status_code == 201, made.text
    body = made.json()
    assert set(body) == {"team", "lead", "host_token"} and body["team"] == "crew"
    assert body["lead"]["name"] == "lead" and body["lead"]["token"].startswith("sbm_")
    assert body["host_token"].startswith("sbh_")
    # The Lead's token calls the tools; the host token opens a host websocket.
    listed = await api.ok(body["lead"]["token"], "list_agents")
    assert [m["name"] for m in listed["agents"]] == ["lead"]
    host = Agent(body["host_token"], path="/ws/host/")
    await host.connect(status=None)
    await host.close()
    # Only the hashes are kept: no read answers a token again.
    detail = await api.http.get("/api/v1/teams/crew", headers=ops)
    assert detail.status_code == 200 and body["host_token"] not in detail.text and body["lead"]["token"] not in detail.text
    # The same name again, and a bad one: a 4xx with a code, nothing made.
    again = await api.http.post("/api/v1/teams", json={"name": "crew"}, headers=ops)
    assert again.status_code == 409 and again.json()["error"]["code"] == "TEAM_NAME_TAKEN", again.text
    bad = await api.http.post("/api/v1/teams", json={"name": "no spaces"}, headers=ops)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "VALIDATION_ERROR", bad.text
    assert await database_sync_to_async(Team.objects.count)() == 1


async def test_rotating_the_host_token_shows_the_new_one_once_and_disconnects_the_old(api):
    team = await team_new()
    ops = await person("ops", operator=True)
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await host_recorded()

    rotated = await api.http.post("/api/v1/teams/alpha/host_token/rotate", headers=ops)
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()["host_token"]
    assert rotated.json()["team"] == "alpha" and new.startswith("sbh_") and new != team["host"]
    # The host connected with the old token is told to reconnect, and the old token is refused.
    closed = await host.comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4012}
    assert await host_refused(team["host"])
    fresh = Agent(new, path="/ws/host/")
    await fresh.connect(status=None)
    await fresh.close()
    missing = await api.http.post("/api/v1/teams/nope/host_token/rotate", headers=ops)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"


async def test_viewers_and_member_tokens_may_neither_create_teams_nor_rotate_host_tokens(api):
    team = await team_new()
    viewer = await person("watcher", operator=False)
    for headers in (viewer, {"Authorization": f"Bearer {team['lead']}"}):
        made = await api.http.post("/api/v1/teams", json={"name": "sneaky"}, headers=headers)
        assert made.status_code == 403 and made.json()["error"]["code"] == "FORBIDDEN", made.text
        rotated = await api.http.post("/api/v1/teams/alpha/host_token/rotate", headers=headers)
        assert rotated.status_code == 403 and rotated.json()["error"]["code"] == "FORBIDDEN", rotated.text
    anonymous = await api.http.post("/api/v1/teams/alpha/host_token/rotate")
    assert anonymous.status_code == 401
    assert await database_sync_to_async(Team.objects.count)() == 1
    # The host token still works: nothing was rotated.
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await host.close()
