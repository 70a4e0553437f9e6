"""The `delivery` observation in send_message's result (mailbox/engine/answers.py: delivery_observation)."""
from datetime import datetime

import pytest

from mailbox.plumbing import faults
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


def observed(sent: dict) -> dict:
    delivery = sent["delivery"]
    assert set(delivery) == {"target_status", "observed_at", "host_connected", "expected", "warnings"}
    assert datetime.fromisoformat(delivery["observed_at"].replace("Z", "+00:00"))
    return delivery


async def test_a_running_target_gets_it_at_its_next_step_boundary(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="m")
    delivery = observed(sent)
    assert sent["status"] == "accepted"
    assert delivery["target_status"] == "running"
    assert "next step boundary" in delivery["expected"]
    assert delivery["warnings"] == []
    await agent.close()


async def test_an_idle_target_starts_a_turn(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("idle")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="m")
    delivery = observed(sent)
    assert delivery["target_status"] == "idle"
    assert "starts a turn" in delivery["expected"]
    assert delivery["warnings"] == []
    await agent.close()


async def test_an_inactive_target_with_a_host_is_being_resumed(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    provision = await host.expect("start")
    first = Agent(provision["token"])
    await first.connect("idle")
    await first.close()

    sent = await api.ok(team["lead"], "send_message", target="implementer", message="wake up")
    delivery = observed(sent)
    assert sent["status"] == "accepted"
    assert delivery["target_status"] == "inactive"
    assert delivery["host_connected"] is True
    assert "resum" in delivery["expected"]
    assert delivery["warnings"] == []
    assert (await host.expect("start"))["reason"] == "resume"
    await host.close()


async def test_an_inactive_target_without_a_host_waits_for_its_session(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("idle")
    await agent.close()

    sent = await api.ok(team["lead"], "send_message", target="implementer", message="when you are back")
    delivery = observed(sent)
    assert sent["status"] == "queued"
    assert delivery["target_status"] == "inactive"
    assert delivery["host_connected"] is False
    assert "waits" in delivery["expected"]
    [warning] = delivery["warnings"]
    assert "no host is connected" in warning and "do not resend" in warning


async def test_a_target_still_provisioning_without_a_host_waits_too(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="first task")
    delivery = observed(sent)
    assert sent["status"] == "queued"
    assert delivery["target_status"] == "provisioning"
    assert "no host is connected" in delivery["warnings"][0]


async def test_a_temporary_failure_is_queued_for_recovery(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    faults.arm("push")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="m")
    delivery = observed(sent)
    assert sent["status"] == "queued"
    assert delivery["target_status"] == "running"
    [warning] = delivery["warnings"]
    assert "queued for recovery" in warning and "do not resend" in warning
    assert "recovery" in delivery["expected"]
    await agent.close()


async def test_the_description_says_accepted_is_not_task_acceptance_and_queued_is_not_to_be_resent(api):
    tools = (await api.http.get("/api/v1/tools")).json()
    description = next(t for t in tools if t["name"] == "send_message")["description"]
    assert "neither means the target accepted the task" in description
    assert "Never resend a queued message" in description
