"""An operator cancels a message that is not delivered yet (mailbox/engine/delivery.py message_cancel;
issue 28 item 4): it becomes ``cancelled``, a final state, in the Lead log and the trace; it is
never pushed or replayed afterwards, also not by a push already in flight (the target's entry
for it is answered but records nothing); a delivered message answers 409. A cancel racing the
delivery: exactly one wins, and nothing is delivered twice or after its cancel."""
import asyncio

import pytest
from channels.db import database_sync_to_async

from mailbox.models import HistoryEntry, TeamMessage
from mailbox.operations import recovery
from tests.support.inproc import Agent, person, spawn, team_new, team_with_session, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def state_of(message_id: str) -> str:
    return TeamMessage.objects.get(pk=message_id).state


@database_sync_to_async
def held(message_id: str) -> bool:
    return HistoryEntry.objects.filter(message_id=message_id).exists()


async def cancel(api, headers, message_id: str):
    return await api.http.post(f"/api/v1/teams/alpha/messages/{message_id}/cancel", headers=headers)


async def test_a_queued_message_cancelled_is_never_pushed_or_replayed(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")  # no session, no host: the message waits
    ops, viewer = await person("ops", True), await person("viewer", False)
    sent = await api.ok(team["lead"], "send_message", target="impl", message="never mind")
    assert sent["status"] == "queued"

    assert (await cancel(api, viewer, sent["message_id"])).status_code == 403
    answer = await cancel(api, ops, sent["message_id"])
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"]["state"] == "cancelled" and answer.json()["message"]["cancelled_at"]
    assert (await cancel(api, ops, sent["message_id"])).json()["message"]["state"] == "cancelled"  # as it is

    # A session's hello replays nothing, and recovery pushes nothing.
    impl = Agent(await token_for("alpha", "impl"))
    welcome = await impl.connect("idle")
    assert welcome["replay"] == 0 and await impl.nothing("steer")
    await database_sync_to_async(recovery.recovery_pass)()
    assert await impl.nothing("steer") and await state_of(sent["message_id"]) == "cancelled"

    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{sent['message_id']}", headers=viewer)).json()
    assert [e["kind"] for e in trace["events"]][-1] == "cancelled"
    assert trace["events"][-1]["by"] == "ops" and trace["events"][-1]["state"] == "queued"
    listed = (await api.http.get("/api/v1/teams/alpha/messages?state=cancelled", headers=viewer)).json()
    assert [m["id"] for m in listed["messages"]] == [sent["message_id"]]
    summary = (await api.http.get("/api/v1/teams/alpha", headers=viewer)).json()
    impl_row = next(m for m in summary["members"] if m["name"] == "impl")
    assert (impl_row["cancelled"], impl_row["queued"], impl_row["delivered"]) == (1, 0, 0)
    # The charts count it as its own state, and it left the pending depth in its minute.
    charts = (await api.http.get("/teams/alpha/charts.json", headers=viewer)).json()
    impl_chart = next(m for m in charts["members"] if m["name"] == "impl")
    assert impl_chart["numbers"]["cancelled"] == 1 and charts["totals"]["numbers"]["cancelled"] == 1
    assert impl_chart["numbers"]["depth"] == 0 and max(impl_chart["depth"]) == 0
    await impl.close()


async def test_a_push_in_flight_for_a_cancelled_message_records_nothing_and_a_delivered_one_is_409(api):
    team, impl = await team_with_session(api, "impl", "running")
    ops = await person("ops", True)
    first = await api.ok(team["lead"], "send_message", target="impl", message="first")
    second = await api.ok(team["lead"], "send_message", target="impl", message="second")
    steers = [(await impl.expect("steer"))["message"] for _ in range(2)]

    assert (await cancel(api, ops, second["message_id"])).json()["message"]["state"] == "cancelled"
    # The session integrates both at its step boundary: the cancelled one is answered, not recorded.
    delivered = await impl.integrate(steers[0])
    assert delivered["folded"] is False and "cancelled" not in delivered
    ack = await impl.integrate(steers[1])
    assert ack["folded"] is True and ack["cancelled"] is True
    assert await held(first["message_id"]) and not await held(second["message_id"])
    assert (await state_of(first["message_id"]), await state_of(second["message_id"])) == ("delivered", "cancelled")

    refused = await cancel(api, ops, first["message_id"])
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "MESSAGE_ALREADY_DELIVERED"
    await impl.close()


@pytest.mark.parametrize("round_", range(12))
async def test_a_cancel_racing_the_delivery_lets_exactly_one_win(api, round_):
    team, impl = await team_with_session(api, "impl", "running")
    ops = await person("ops", True)
    sent = await api.ok(team["lead"], "send_message", target="impl", message=f"race {round_}")
    steer = (await impl.expect("steer"))["message"]

    ack, answer = await asyncio.gather(impl.integrate(steer), cancel(api, ops, sent["message_id"]))
    state, stored = await state_of(sent["message_id"]), await held(sent["message_id"])
    if answer.status_code == 200:  # the cancel won: the entry recorded nothing
        assert state == "cancelled" and not stored and ack.get("cancelled") is True
    else:  # the delivery won: the cancel was refused
        assert answer.status_code == 409 and state == "delivered" and stored and ack["folded"] is False
    # Either way, nothing more: no redelivery, no second entry.
    await database_sync_to_async(recovery.recovery_pass)()
    assert await impl.nothing("steer")
    assert await database_sync_to_async(HistoryEntry.objects.filter(message_id=sent["message_id"]).count)() == int(stored)
    await impl.close()
