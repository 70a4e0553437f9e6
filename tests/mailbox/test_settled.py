"""tests/support/inproc.py's ``Agent.settled``, which the in-process tests assert absence
after (``nothing``): what the server was to send by then is there, each way it reaches a
socket, so ``nothing`` fails when the frame came. No sleep: each check ends as soon as the
server's probes come back."""
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group, User

from accounts.tokens import operator_token_create
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_steer_pushed_by_a_send_is_there_once_the_send_returned(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("running")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="hi")
    assert not await agent.nothing("steer")  # through the session's outbox
    assert (await agent.expect("steer"))["message"]["id"] == sent["message_id"]
    assert await agent.nothing("steer")
    await agent.close()


async def test_a_prompt_dispatched_by_a_status_frame_is_there_once_the_status_returned(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("running")
    token = await database_sync_to_async(
        lambda: operator_token_create(user=_operator("ops")))()
    response = await api.http.post("/api/v1/teams/alpha/prompts", json={"target": "implementer", "content": "sum up"},
                                   headers={"Authorization": f"Token {token}"})
    assert response.status_code == 201, response.text
    assert await agent.nothing("prompt")  # running: it waits for the turn to end
    await agent.status("idle")  # the frame's handling dispatched it
    assert "prompt" in [frame["type"] for frame in agent.buffer]
    await agent.close()


async def test_a_start_published_to_a_host_through_the_channel_layer_is_there(api):
    team = await team_new()
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    assert await host.nothing("start")
    await api.ok(team["lead"], "spawn_teammate", name="worker", description="d", prompt="")
    assert not await host.nothing("start")  # the host group's start, through the layer
    assert (await host.expect("start"))["member"] == "worker"
    await host.close()


def _operator(name: str) -> User:
    user = User.objects.create_user(name, password="pw")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user
