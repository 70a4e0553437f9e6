"""Target-local order, temporary failures and recovery (mailbox/engine/delivery.py)."""
import asyncio

import pytest
from channels.db import database_sync_to_async

from mailbox.plumbing import faults
from mailbox.models import HistoryEntry, LeadLogRecord, TeamMessage
from mailbox.operations.recovery import messages_recover
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def states(target: str) -> list[tuple[int, str]]:
    return list(TeamMessage.objects.filter(target__name=target).order_by("seq").values_list("seq", "state"))


@database_sync_to_async
def queued_log_order(target: str) -> list[str]:
    return list(
        LeadLogRecord.objects.filter(kind="team/message/queued", message__target__name=target)
        .order_by("id")
        .values_list("message_id", flat=True)
    )


async def deliver_all(agent: Agent, count: int) -> list[dict]:
    got = []
    for _ in range(count):
        message = (await agent.expect("steer"))["message"]
        got.append(message)
        await agent.integrate(message)
    return got


async def test_concurrent_sends_from_several_members_arrive_in_lead_log_order(api):
    team = await team_new()
    senders = {"lead": team["lead"]}
    for name in ("researcher", "reviewer", "tester"):
        senders[name] = await spawn(api, team["lead"], "alpha", name)
    target = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(target)
    await agent.connect("running")

    async def burst(name: str, token: str):
        for i in range(5):
            response = await api.tool(token, "send_message", target="implementer", message=f"{name} #{i}")
            assert response.status_code == 200, response.text

    await asyncio.gather(*(burst(n, t) for n, t in senders.items()))
    got = await deliver_all(agent, 20)

    assert [m["seq"] for m in got] == list(range(1, 21))
    assert [m["id"] for m in got] == await queued_log_order("implementer")
    # Each sender's own messages keep their order too.
    for name in senders:
        mine = [m["content"] for m in got if m["sender"] == name]
        assert mine == [f"{name} #{i}" for i in range(5)]
    assert await states("implementer") == [(seq, "delivered") for seq in range(1, 21)]
    await agent.close()


@pytest.mark.parametrize("point", ["inspection", "admission", "push"])
async def test_a_temporary_admission_failure_answers_queued_and_recovery_delivers_in_order(api, point):
    team = await team_new()
    target = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(target)
    await agent.connect("running")

    faults.arm(point, times=2)
    first = await api.ok(team["lead"], "send_message", target="implementer", message="one")
    second = await api.ok(team["lead"], "send_message", target="implementer", message="two")
    assert (first["status"], second["status"]) == ("queued", "queued")
    assert await agent.nothing("steer") or point == "push"
    row = await database_sync_to_async(TeamMessage.objects.get)(pk=first["message_id"])
    assert row.state == "queued" and row.attempts == 2 and "injected" in row.last_error

    # The third send admits every earlier pending message of the target first.
    third = await api.ok(team["lead"], "send_message", target="implementer", message="three")
    assert third["status"] == "accepted"
    got = await deliver_all(agent, 3) if point != "push" else None
    if point == "push":
        # A failed push may have rung the doorbell for "one" already; the session
        # folds repeats by id, and what it keeps is in order.
        seen, got = set(), []
        while len(got) < 3:
            message = (await agent.expect("steer"))["message"]
            if message["id"] not in seen:
                seen.add(message["id"])
                got.append(message)
                await agent.integrate(message)
    assert [m["content"] for m in got] == ["one", "two", "three"]
    assert await states("implementer") == [(1, "delivered"), (2, "delivered"), (3, "delivered")]
    await agent.close()


async def test_resume_failure_leaves_the_message_queued_until_the_sweeper_retries(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    provision = await host.expect("start")
    session = Agent(provision["token"])
    await session.connect("idle")
    await session.close()

    faults.arm("resume", times=1)
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="resume me")
    assert sent["status"] == "queued"
    assert await host.nothing("start")

    summary = await database_sync_to_async(messages_recover)()
    assert summary["admitted"] == 1
    resume = await host.expect("start")
    assert resume["reason"] == "resume"
    resumed = Agent(resume["token"])
    await resumed.connect("idle")
    await deliver_all(resumed, 1)
    assert await states("implementer") == [(1, "delivered")]
    await resumed.close()
    await host.close()


async def test_a_fault_between_the_entry_and_the_delivered_record_is_recovered_once(api):
    team = await team_new()
    target = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(target)
    await agent.connect("running")
    first = await api.ok(team["lead"], "send_message", target="implementer", message="a")
    second = await api.ok(team["lead"], "send_message", target="implementer", message="b")

    faults.arm("delivered_record", times=2)
    for _ in range(2):
        message = (await agent.expect("steer"))["message"]
        ack = await agent.integrate(message)
        assert ack["folded"] is False  # the entry itself is durable
    assert await states("implementer") == [(1, "accepted"), (2, "accepted")]

    # Path 1: the session reconnects; hello replays the undelivered; it folds and reports again.
    await agent.close()
    again = Agent(target)
    welcome = await again.connect("idle")
    assert welcome["replay"] == 2
    replayed = (await again.expect("steer"))["message"]
    assert replayed["id"] == first["message_id"]
    assert (await again.integrate(replayed))["folded"] is True

    # Path 2: the sweeper reconciles the other from the history alone.
    summary = await database_sync_to_async(messages_recover)()
    assert summary["reconciled"] == 1

    counts = await database_sync_to_async(
        lambda: [
            (
                HistoryEntry.objects.filter(message_id=m).count(),
                LeadLogRecord.objects.filter(message_id=m, kind="team/message/delivered").count(),
            )
            for m in (first["message_id"], second["message_id"])
        ]
    )()
    assert counts == [(1, 1), (1, 1)]
    assert await states("implementer") == [(1, "delivered"), (2, "delivered")]
    await again.close()
