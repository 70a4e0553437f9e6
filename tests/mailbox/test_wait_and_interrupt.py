"""mailbox/transports/tools.py: wait_agent and interrupt_agent."""
import asyncio

import pytest

from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def test_wait_agent_returns_at_once_when_no_peer_is_active(api):
    team = await team_new()
    result = await api.ok(team["lead"], "wait_agent", timeout_ms=10_000)
    assert result == {"timed_out": False, "no_progress": {"reason": "no-active-peer"}}


async def test_wait_agent_returns_when_a_peer_changes_status(api, wait_reads):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    waiting = asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=10_000))
    await wait_reads.reached()  # the wait has read what it compares with
    assert not waiting.done()
    await agent.status("idle")
    assert await asyncio.wait_for(waiting, 5) == {"timed_out": False, "no_progress": None}
    await agent.close()


async def test_wait_agent_returns_when_a_message_reaches_the_caller_and_wakes_nobody(api, wait_reads):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    waiting = asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=10_000))
    await wait_reads.reached()  # the wait has read what it compares with
    await api.ok(impl, "send_message", target="lead", message="done")
    assert await asyncio.wait_for(waiting, 5) == {"timed_out": False, "no_progress": None}
    # Waiting pushed nothing to anyone: the first steer the teammate gets is one sent after it.
    after = await api.ok(team["lead"], "send_message", target="implementer", message="after the wait")
    assert (await agent.expect("steer"))["message"]["id"] == after["message_id"]
    await agent.close()


async def test_interrupt_agent_stops_a_running_turn_and_keeps_the_inbox(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    result = await api.ok(team["lead"], "interrupt_agent", target="implementer")
    assert result == {"previous_status": "running"}
    assert (await agent.expect("interrupt")) == {"type": "interrupt"}
    await agent.status("idle")
    # Nothing pending was dropped: a message sent now still arrives.
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="next")
    assert (await agent.expect("steer"))["message"]["id"] == sent["message_id"]
    # An idle target is not interrupted.
    assert await api.ok(team["lead"], "interrupt_agent", target="implementer") == {"previous_status": "idle"}
    # Nothing was sent: a steer sent after it arrives with no interrupt before it (one socket, in order).
    after = await api.ok(team["lead"], "send_message", target="implementer", message="after the interrupt")
    assert (await agent.expect("steer"))["message"]["id"] == after["message_id"]
    assert [f["type"] for f in agent.buffer if f["type"] == "interrupt"] == []
    await agent.close()
