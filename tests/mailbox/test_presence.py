"""mailbox/members/presence.py: which processes are alive, and recovery of what a dead
process left behind (recovery.presence_reap); a live process taken for dead.

These run on whatever the test run is on (scripts/test.sh runs them on SQLite +
in-memory and on PostgreSQL + Redis); where the two databases serialise by
different means, each test asserts the guarantee, not the mechanism.
"""
import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.utils import timezone

from mailbox.engine import delivery
from mailbox.members import presence
from mailbox.operations import recovery
from tests.support.sends import message_send
from mailbox.models import HostPresence, MessageState, ServerProcess, SessionPresence
from teams.models import Member, SessionState, Status
from teams.services import member_session_set, member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_background_sweeper(settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "SWEEP_INTERVAL": 0, "PROCESS_TIMEOUT": 30}


def _team(name="presence", teammates=("worker",)):
    team, lead, _, _ = team_create(name=name)
    members = [member_spawn(lead=lead, name=n, description="d", prompt="p") for n in teammates]
    return team, lead, members


def _dead_process(pid="dead-host:1:0000"):
    ServerProcess.objects.create(pk=pid, last_seen=timezone.now() - timedelta(seconds=3600))
    return pid


def test_reaping_a_dead_process_closes_its_sessions_and_drops_its_hosts():
    team, lead, (worker,) = _team()
    dead = _dead_process()
    member_session_set(member_id=worker.pk, state=SessionState.RUNNING, channel="dead-channel")
    SessionPresence.objects.create(channel="dead-channel", member=worker, process_id=dead)
    HostPresence.objects.create(team=team, channel="dead-host-channel", process_id=dead)
    presence.process_beat()  # this process: alive
    presence.host_attached(team_id=team.pk, channel="live-host-channel")

    result = recovery.presence_reap()

    assert result["sessions_closed"] == 1 and result["hosts_dropped"] == 1 and result["dead_processes"] == 1
    assert Member.objects.get(pk=worker.pk).status == Status.INACTIVE
    assert list(HostPresence.objects.values_list("channel", flat=True)) == ["live-host-channel"]
    assert not SessionPresence.objects.exists()
    assert not ServerProcess.objects.filter(pk=dead).exists()
    assert ServerProcess.objects.filter(pk=presence.PROCESS_ID).exists()
    presence.host_detached(channel="live-host-channel")


def test_a_reaped_members_pending_messages_go_to_a_live_host_at_once():
    team, lead, (worker,) = _team()
    dead = _dead_process()
    member_session_set(member_id=worker.pk, state=SessionState.IDLE, channel="dead-channel")
    SessionPresence.objects.create(channel="dead-channel", member=worker, process_id=dead)
    # Admitted while the member still looked idle: pushed into a channel nobody reads.
    message, answer = message_send(sender=lead, target_name="worker", content="anyone?")
    assert answer["delivery"]["target_status"] == Status.IDLE and message.state == MessageState.ACCEPTED
    presence.host_attached(team_id=team.pk, channel="live-host-channel")
    Member.objects.filter(pk=worker.pk).update(start_requested_at=None)

    recovery.presence_reap()

    worker.refresh_from_db()
    assert worker.status == Status.INACTIVE
    assert worker.start_requested_at is not None  # the live host was asked to resume it
    message.refresh_from_db()
    assert message.state == MessageState.ACCEPTED  # still undelivered, never lost: replayed on hello
    assert [m.id for m in delivery.undelivered_for(member=worker)] == [message.id]
    presence.host_detached(channel="live-host-channel")


def test_a_newer_session_elsewhere_is_not_closed_by_reaping_the_old_one():
    team, lead, (worker,) = _team()
    dead = _dead_process()
    member_session_set(member_id=worker.pk, state=SessionState.RUNNING, channel="dead-channel")
    SessionPresence.objects.create(channel="dead-channel", member=worker, process_id=dead)
    # The session reconnected to a live process before the reaper ran.
    member_session_set(member_id=worker.pk, state=SessionState.IDLE, channel="live-channel")
    presence.session_attached(member_id=worker.pk, channel="live-channel")

    recovery.presence_reap()

    worker.refresh_from_db()
    assert worker.status == Status.IDLE and worker.session_channel == "live-channel"
    assert list(SessionPresence.objects.values_list("channel", flat=True)) == ["live-channel"]
    presence.session_detached(channel="live-channel")


def test_a_live_process_reaped_by_mistake_closes_its_websockets_so_they_say_hello_again():
    team, lead, (worker,) = _team()

    async def scenario() -> None:
        # Real channels of this process's layer: on Redis pub/sub a channel hears
        # only what is published after it subscribed, as a consumer's does.
        layer = get_channel_layer()
        session_channel, host_channel = await layer.new_channel(), await layer.new_channel()
        await sync_to_async(presence.session_attached)(member_id=worker.pk, channel=session_channel)
        await sync_to_async(presence.host_attached)(team_id=team.pk, channel=host_channel)
        # Another process took us for dead and cleaned up: the session is ended and
        # the host dropped.
        await sync_to_async(ServerProcess.objects.filter(pk=presence.PROCESS_ID).delete)()
        await sync_to_async(SessionPresence.objects.all().delete)()
        await sync_to_async(HostPresence.objects.all().delete)()

        assert await sync_to_async(presence.process_beat)() is True

        assert await asyncio.wait_for(layer.receive(session_channel), 5) == {"type": "session.reset"}
        assert await asyncio.wait_for(layer.receive(host_channel), 5) == {"type": "host.reset"}
        # Nothing deaf is recorded as present: the reconnecting clients record themselves.
        assert not await sync_to_async(SessionPresence.objects.exists)()
        assert not await sync_to_async(HostPresence.objects.exists)()
        await sync_to_async(presence.session_detached)(channel=session_channel)
        await sync_to_async(presence.host_detached)(channel=host_channel)

    async_to_sync(scenario)()


def test_two_first_beats_at_once_do_not_take_a_fresh_process_for_a_reaped_one(monkeypatch):
    """The heartbeat thread and the first websocket's registration both beat at start-up.
    Interleaved, the second saw the first's new row as a resurrection and closed the
    process's first websockets (code 4012). The race is PostgreSQL's (READ COMMITTED):
    on SQLite the second beat already waits at BEGIN IMMEDIATE, so there this test
    passes with or without the lock; the PostgreSQL run is the one that guards it."""
    resets = []
    monkeypatch.setattr(presence, "_websockets_reset", lambda: resets.append(True))
    both_missed = threading.Barrier(2)
    create = ServerProcess.objects.update_or_create

    def create_after_both_looked(*args, **kwargs):
        # Give the other beat the chance to look too before this one creates the row.
        try:
            both_missed.wait(timeout=0.5)
        except threading.BrokenBarrierError:
            pass  # the other beat is not looking meanwhile: beats are one at a time
        return create(*args, **kwargs)

    monkeypatch.setattr(ServerProcess.objects, "update_or_create", create_after_both_looked)
    answers = []

    def beat():
        try:
            answers.append(presence.process_beat())
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    assert sorted(answers) == [False, True]  # one registered the process, the other refreshed it
    assert resets == []
    assert ServerProcess.objects.filter(pk=presence.PROCESS_ID).count() == 1
