"""mailbox/plumbing/events.py: doorbells to sessions, hosts and dashboards.

What describes a write goes out after its commit, and never for a write rolled
back; a session this process holds is handed its events by a call; a team's
dashboard rings are coalesced; after Redis is back, the undelivered messages of
the sessions that may have missed a push are pushed again. On the real database
and channel layer; where the point is that something was not sent, the test
waits for a later event that must come after it.
"""
import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from mailbox.plumbing import events
from mailbox.operations import recovery
from tests.support.sends import message_send
from mailbox.models import TeamMessage
from teams.models import SessionState
from teams.services import member_session_set, member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


async def _next(layer, channel: str) -> dict:
    return await asyncio.wait_for(layer.receive(channel), 5)


class _Rollback(Exception):
    pass


async def test_a_doorbell_for_a_write_goes_out_after_its_commit_and_never_for_a_rollback():
    layer = get_channel_layer()
    channel = await layer.new_channel()

    def write(commit: bool, n: int) -> None:
        try:
            with transaction.atomic():
                events.send_after_commit(channel, {"type": "x", "n": n, "when": "after commit"}, to_channel=True)
                events.send_now(channel, {"type": "x", "n": n, "when": "in the transaction"}, to_channel=True)
                if not commit:
                    raise _Rollback
        except _Rollback:
            pass

    await sync_to_async(write)(False, 1)
    await sync_to_async(write)(True, 2)
    # The rolled-back write's immediate publish, then the committed write's two: its
    # own immediate one first. The rolled-back doorbell never went out.
    received = [await _next(layer, channel) for _ in range(3)]
    assert [(e["n"], e["when"]) for e in received] == [
        (1, "in the transaction"),
        (2, "in the transaction"),
        (2, "after commit"),
    ]


async def test_a_dashboard_notification_rings_the_teams_group_with_its_kind_and_hint():
    layer = get_channel_layer()
    team, _, _, _ = await sync_to_async(team_create)(name="events")
    channel = await layer.new_channel()
    await layer.group_add(events.dashboard_group(team.pk), channel)

    def notify():
        with transaction.atomic():
            events.dashboard_notify(team.pk, "task", task="task-1")

    await sync_to_async(notify)()
    assert await _next(layer, channel) == {"type": "team.changed", "kind": "task", "task": "task-1"}
    await layer.group_discard(events.dashboard_group(team.pk), channel)


class _HeldSession:
    """What a websocket consumer registers (events.LocalSession): it records what it is pushed."""

    def __init__(self):
        self.pushed: list[dict] = []
        self.holds_steers = False

    def push(self, event: dict) -> None:
        self.pushed.append(event)

    def awaits_entries(self) -> bool:
        return self.holds_steers


async def test_a_session_this_process_holds_is_pushed_to_by_a_call_and_through_the_layer_once_it_is_gone():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    session = _HeldSession()
    events.session_register(channel, session)
    try:
        events.session_push(channel, {"type": "session.steer", "n": 1})
        assert session.pushed == [{"type": "session.steer", "n": 1}]  # at once: no layer round trip
        assert events.session_awaits_entries(channel) is False
        session.holds_steers = True
        assert events.session_awaits_entries(channel) is True
    finally:
        events.session_unregister(channel)
    assert events.session_awaits_entries(channel) is False  # not one of ours any more

    events.session_push(channel, {"type": "session.steer", "n": 2})
    assert await _next(layer, channel) == {"type": "session.steer", "n": 2}
    assert session.pushed == [{"type": "session.steer", "n": 1}]


async def test_ringing_sessions_again_pushes_their_undelivered_messages_again_in_seq_order():
    layer = get_channel_layer()
    channel = await layer.new_channel()

    def setup():
        team, lead, _, _ = team_create(name="events")
        worker = member_spawn(lead=lead, name="worker", description="d", prompt="")
        member_session_set(member_id=worker.pk, state=SessionState.RUNNING, channel=channel)
        sent = [message_send(sender=lead, target_name="worker", content=t)[0] for t in ("one", "two")]
        return [m.id for m in sent]

    sent = await sync_to_async(setup)()
    assert [(await _next(layer, channel))["message"]["id"] for _ in sent] == sent  # the first pushes

    ring_again = sync_to_async(recovery.sessions_ring_again)
    assert await ring_again(channels=[]) == 0
    assert await ring_again(channels=[channel, "a-channel-nobody-has"]) == 1
    again = [await _next(layer, channel) for _ in sent]
    assert [(e["type"], e["message"]["id"]) for e in again] == [("session.steer", m) for m in sent]
    repushes = await sync_to_async(lambda: sorted(TeamMessage.objects.values_list("repushes", flat=True)))()
    assert repushes == [1, 1]


async def test_dashboard_doorbells_are_coalesced_per_team(api):
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(events.dashboard_group(999), channel)
    for i in range(50):
        events.dashboard_ring(999, {"type": "team.changed", "kind": "message", "n": i})
    first = await asyncio.wait_for(layer.receive(channel), 2)
    assert first["n"] == 0  # the first ring of a quiet team goes out at once
    closing = await asyncio.wait_for(layer.receive(channel), 2)
    assert closing["n"] == 49  # the other 49 went out as one, with the latest hint
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(layer.receive(channel), events.DASHBOARD_RING_INTERVAL * 3)
    await layer.group_discard(events.dashboard_group(999), channel)
