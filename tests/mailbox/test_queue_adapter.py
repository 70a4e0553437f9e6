"""mailbox/members/sessions.py: human prompts through the Queue adapter are always their own turn."""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import HumanPrompt
from tests.support.inproc import Agent, operator_token, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def prompt_state(prompt_id: str) -> str:
    return HumanPrompt.objects.get(pk=prompt_id).state


async def test_a_prompt_to_a_running_target_waits_for_its_turn_to_end_and_is_its_own_turn(api):
    team = await team_new()
    target = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(target)
    await agent.connect("running")
    token = await operator_token("ops", operator=True)

    response = await api.http.post(
        "/api/v1/teams/alpha/prompts",
        json={"target": "implementer", "content": "please summarise"},
        headers={"Authorization": f"Token {token}"},
    )
    assert response.status_code == 201, response.text
    prompt = response.json()["prompt"]
    assert prompt["state"] == "queued"
    # Never merged into the running turn.
    assert await agent.nothing("prompt")

    # A team message meanwhile still steers into the running turn.
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="also this")
    steer = (await agent.expect("steer"))["message"]
    assert steer["id"] == sent["message_id"]
    await agent.integrate(steer)
    assert await agent.nothing("prompt")

    await agent.status("idle")
    pushed = await agent.expect("prompt")
    assert pushed["prompt"] == {"id": prompt["id"], "author": "ops", "content": "please summarise"}

    await agent.status("running")
    await agent.send(
        {"type": "entry", "entry": {"id": "p-1", "kind": "prompt", "prompt_id": prompt["id"], "text": "please summarise"}}
    )
    await agent.expect("ack")
    assert await prompt_state(prompt["id"]) == "started"
    await agent.status("idle")
    assert await prompt_state(prompt["id"]) == "completed"
    await agent.close()


async def test_two_prompts_are_two_turns(api):
    team = await team_new()
    target = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(target)
    await agent.connect("idle")
    token = await operator_token("ops", operator=True)
    headers = {"Authorization": f"Token {token}"}
    for content in ("first", "second"):
        response = await api.http.post(
            "/api/v1/teams/alpha/prompts", json={"target": "implementer", "content": content}, headers=headers
        )
        assert response.status_code == 201
    first = (await agent.expect("prompt"))["prompt"]
    assert first["content"] == "first"
    await agent.status("running")
    await agent.send({"type": "entry", "entry": {"id": "p-1", "kind": "prompt", "prompt_id": first["id"]}})
    await agent.expect("ack")
    assert await agent.nothing("prompt")
    await agent.status("idle")
    second = (await agent.expect("prompt"))["prompt"]
    assert second["content"] == "second"
    await agent.close()


async def test_a_viewer_can_read_but_not_prompt_or_retry(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="stuck")
    viewer = {"Authorization": f"Token {await operator_token('watcher', operator=False)}"}

    assert (await api.http.get("/api/v1/teams/alpha", headers=viewer)).status_code == 200
    listing = await api.http.get("/api/v1/teams/alpha/messages", headers=viewer)
    assert [m["id"] for m in listing.json()["messages"]] == [sent["message_id"]]

    refused = await api.http.post(
        "/api/v1/teams/alpha/prompts", json={"target": "implementer", "content": "x"}, headers=viewer
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    refused = await api.http.post(f"/api/v1/teams/alpha/messages/{sent['message_id']}/retry", headers=viewer)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    assert await database_sync_to_async(HumanPrompt.objects.count)() == 0


async def test_a_prompt_to_a_member_without_a_session_resumes_it_through_the_host(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    token = await operator_token("ops", operator=True)
    response = await api.http.post(
        "/api/v1/teams/alpha/prompts",
        json={"target": "lead", "content": "begin"},
        headers={"Authorization": f"Token {token}"},
    )
    assert response.status_code == 201
    # No host yet: the prompt waits. A host connecting is asked to start the Lead for it.
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    starts = {}
    for _ in range(2):
        start = await host.expect("start")
        starts[start["member"]] = start
    assert starts["lead"]["reason"] == "resume"
    assert starts["implementer"]["reason"] == "provision"

    lead = Agent(starts["lead"]["token"])
    await lead.connect("idle")
    assert (await lead.expect("prompt"))["prompt"]["content"] == "begin"
    await lead.close()
    await host.close()


async def test_prompts_waiting_for_one_member_are_capped_on_the_operator_api_too(api, settings):
    """The cap is the Queue adapter's (issue 26): every source of prompts meets it."""
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_QUEUED_PROMPTS_PER_MEMBER": 2}
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")  # no session: its prompts wait
    token = await operator_token("ops", operator=True)

    async def prompt(target: str, content: str):
        return await api.http.post("/api/v1/teams/alpha/prompts", json={"target": target, "content": content},
                                   headers={"Authorization": f"Token {token}"})

    for n in range(2):
        assert (await prompt("implementer", f"p{n}")).status_code == 201
    refused = await prompt("implementer", "one too many")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "PROMPT_QUEUE_FULL" and refused.json()["limit"] == 2
    assert await database_sync_to_async(HumanPrompt.objects.count)() == 2
    assert (await prompt("lead", "another member's queue is its own")).status_code == 201
