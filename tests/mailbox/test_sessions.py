"""mailbox/members/sessions.py: what happens when an agent session says hello, reports its
status or an entry, and closes; a host leaving or failing a start; interrupt.

Called as the websocket consumers call them, on the real database and channel
layer; a session's channel is a real channel of the layer, read by the test.
"""
import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model

from mailbox.engine import delivery, hot_path, queue_adapter
from mailbox.members import hosts, interrupt, presence, sessions
from tests.support.sends import message_send
from mailbox.models import HostPresence, HumanPrompt, LeadLogRecord, LogKind, MessageState, PromptState, SessionPresence
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, SessionState, Status, Team
from teams.services import member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


def _team(teammates=("worker",)):
    team, lead, _, _ = team_create(name="sessions")
    members = [member_spawn(lead=lead, name=n, description="d", prompt="") for n in teammates]
    return team, lead, members


def _member(pk: int) -> Member:
    return Member.objects.get(pk=pk)


def _member_records(team_id: int) -> list[dict]:
    return list(LeadLogRecord.objects.filter(team_id=team_id, kind=LogKind.MEMBER).order_by("id").values_list("data", flat=True))


async def _next(layer, channel: str) -> dict:
    return await asyncio.wait_for(layer.receive(channel), 5)


def test_a_hello_records_the_session_and_replays_every_undelivered_message_in_seq_order():
    team, lead, (worker,) = _team()
    # No session and no host: both wait, queued.
    first, _ = message_send(sender=lead, target_name="worker", content="one")
    second, _ = message_send(sender=lead, target_name="worker", content="two")
    assert {first.state, second.state} == {MessageState.QUEUED}

    replay = sessions.session_hello(member_id=worker.pk, state=SessionState.RUNNING, channel="hello-1")

    assert [(m["id"], m["seq"], m["content"]) for m in replay] == [(first.id, 1, "one"), (second.id, 2, "two")]
    worker = _member(worker.pk)
    assert worker.status == Status.RUNNING and worker.session_channel == "hello-1"
    assert list(SessionPresence.objects.filter(member=worker).values_list("channel", flat=True)) == ["hello-1"]
    # Admitted by the hello (the replay steers them), not yet delivered.
    assert set(delivery.undelivered_for(member=worker)) == {first, second}
    first.refresh_from_db()
    assert first.state == MessageState.ACCEPTED
    assert _member_records(team.pk)[-1] == {"member": "worker", "status": "running", "previous": "provisioning"}

    # A reconnect's hello replays what is still undelivered, once each.
    again = sessions.session_hello(member_id=worker.pk, state=SessionState.RUNNING, channel="hello-2")
    assert [m["id"] for m in again] == [first.id, second.id]
    assert _member(worker.pk).session_channel == "hello-2"
    presence.session_detached(channel="hello-1")
    presence.session_detached(channel="hello-2")


def test_a_closed_session_leaves_the_member_inactive_unless_a_newer_one_took_over():
    team, lead, (worker,) = _team()
    sessions.session_hello(member_id=worker.pk, state=SessionState.IDLE, channel="old")
    sessions.session_hello(member_id=worker.pk, state=SessionState.IDLE, channel="new")

    sessions.session_closed(member_id=worker.pk, channel="old")  # the older websocket goes
    worker = _member(worker.pk)
    assert worker.status == Status.IDLE and worker.session_channel == "new"
    assert not SessionPresence.objects.filter(channel="old").exists()
    assert SessionPresence.objects.filter(channel="new").exists()

    records = len(_member_records(team.pk))
    sessions.session_closed(member_id=worker.pk, channel="new")
    worker = _member(worker.pk)
    assert worker.status == Status.INACTIVE and worker.session_channel == ""
    assert not SessionPresence.objects.exists()
    assert _member_records(team.pk)[records:] == [{"member": "worker", "status": "inactive", "previous": "idle"}]


async def test_an_idle_session_is_offered_one_prompt_at_a_time_and_idle_again_completes_it():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    team, lead, (worker,) = await sync_to_async(_team)()
    author = await sync_to_async(get_user_model().objects.create_user)(username="op")
    await sync_to_async(sessions.session_hello)(member_id=worker.pk, state=SessionState.RUNNING, channel=channel)
    submit = sync_to_async(queue_adapter.prompt_submit)
    first = await submit(team_id=team.pk, target_name="worker", author=author, content="first question")
    second = await submit(team_id=team.pk, target_name="worker", author=author, content="second question")

    # Running: nothing is offered. Idle: the oldest prompt, once.
    offered_yet = sync_to_async(lambda: HumanPrompt.objects.filter(pushed_at__isnull=False).exists())
    assert not await offered_yet()
    await sync_to_async(sessions.session_status)(member_id=worker.pk, state=SessionState.IDLE, channel=channel)
    offered = await _next(layer, channel)
    assert offered["type"] == "session.prompt" and offered["prompt"]["id"] == first.id
    assert offered["prompt"] == {"id": first.id, "author": "op", "content": "first question"}

    # The session's history records the prompt: its turn has started.
    worker = await sync_to_async(_member)(worker.pk)
    entry = {"id": "p-1", "kind": "prompt", "prompt_id": first.id, "text": "first question"}
    assert await sync_to_async(hot_path.entry_record)(member=worker, entry=entry) is True
    assert await sync_to_async(hot_path.entry_record)(member=worker, entry=entry) is False  # a repeat folds
    state = sync_to_async(lambda pk: HumanPrompt.objects.get(pk=pk).state)
    assert await state(first.id) == PromptState.STARTED
    await sync_to_async(sessions.session_status)(member_id=worker.pk, state=SessionState.RUNNING, channel=channel)

    # The turn ends: the started prompt is completed and the next one offered.
    await sync_to_async(sessions.session_status)(member_id=worker.pk, state=SessionState.IDLE, channel=channel)
    assert await state(first.id) == PromptState.COMPLETED
    offered = await _next(layer, channel)
    assert offered["type"] == "session.prompt" and offered["prompt"]["id"] == second.id
    assert await state(second.id) == PromptState.QUEUED  # offered, not started until its entry
    await sync_to_async(presence.session_detached)(channel=channel)


async def test_only_the_lead_interrupts_and_only_a_running_teammate_hears_it():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    team, lead, (worker, other) = await sync_to_async(_team)(("worker", "other"))
    interrupting = sync_to_async(interrupt.member_interrupt)
    for caller, target, code in [
        (worker, "other", ErrorCode.LEAD_ONLY),
        (lead, "nobody", ErrorCode.TEAM_UNKNOWN_TARGET),
        (lead, "lead", ErrorCode.TEAM_SELF_MESSAGE),
    ]:
        with pytest.raises(TeamError) as refused:
            await interrupting(lead=caller, target_name=target)
        assert refused.value.code == code

    await sync_to_async(sessions.session_hello)(member_id=worker.pk, state=SessionState.IDLE, channel=channel)
    assert await interrupting(lead=lead, target_name="worker") == Status.IDLE
    sent, _ = await sync_to_async(message_send)(sender=lead, target_name="worker", content="after")
    # The first event on the session's channel is the steer sent after: interrupting the
    # idle member sent nothing before it.
    steer = await _next(layer, channel)
    assert steer["type"] == "session.steer" and steer["message"]["id"] == sent.id
    await sync_to_async(sessions.session_status)(member_id=worker.pk, state=SessionState.RUNNING, channel=channel)
    assert await interrupting(lead=lead, target_name="worker") == Status.RUNNING
    assert await _next(layer, channel) == {"type": "session.interrupt"}
    await sync_to_async(presence.session_detached)(channel=channel)


def test_a_failed_start_fails_a_new_teammate_and_keeps_one_that_has_run_inactive():
    team, lead, (fresh, veteran) = _team(("fresh", "veteran"))
    sessions.session_hello(member_id=veteran.pk, state=SessionState.IDLE, channel="veteran-1")
    sessions.session_closed(member_id=veteran.pk, channel="veteran-1")
    Member.objects.filter(pk__in=[fresh.pk, veteran.pk]).update(start_requested_at="2026-01-01T00:00:00Z")

    hosts.host_start_failed(team_id=team.pk, member_name="fresh", error="no such image")
    hosts.host_start_failed(team_id=team.pk, member_name="veteran", error="x" * 3000)
    hosts.host_start_failed(team_id=team.pk, member_name="nobody", error="ignored")  # not a member: nothing

    fresh, veteran = _member(fresh.pk), _member(veteran.pk)
    assert fresh.phase == Phase.FAILED and fresh.start_requested_at is None
    assert veteran.phase == Phase.ACTIVE and veteran.status == Status.INACTIVE and veteran.start_requested_at is None
    failures = [r for r in _member_records(team.pk) if "start_failed" in r]
    assert failures == [
        {"member": "fresh", "start_failed": "no such image"},
        {"member": "veteran", "start_failed": "x" * 2000},
    ]


def test_a_host_that_disconnects_is_no_longer_present():
    team, _, _ = _team()
    presence.host_attached(team_id=team.pk, channel="host-a")
    presence.host_attached(team_id=team.pk, channel="host-b")
    hosts.host_disconnected(channel="host-a")
    assert list(HostPresence.objects.values_list("channel", flat=True)) == ["host-b"]
    hosts.host_disconnected(channel="host-b")
    assert not HostPresence.objects.exists()


async def test_an_entry_that_could_not_be_stored_stops_the_calls_waiting_on_it_and_no_later_one():
    """A tool frame's carried call is not made when an entry it waits for (its own, or one
    the socket sent before it, unanswered) could not be stored; a call that comes once that
    failure was answered runs (members/sessions.py ``Carried``)."""
    pushed: list[dict] = []
    member = Member(name="implementer", team=Team(name="t"))
    session = sessions.ConnectedSession(member=member, channel="c", push=pushed.append)
    loop = asyncio.get_running_loop()
    write, answered = loop.create_future(), loop.create_future()
    session.writes.append(write)
    session.answered_of[write] = answered  # as _entries registers a write
    waiting = sessions.Carried(session, list(session.writes))
    call = asyncio.ensure_future(waiting.answered())

    write.set_result(None)  # committed (here: failed), its answers not pushed yet
    await asyncio.sleep(0)
    assert not call.done(), "the call went on before its entries' answers were out"
    refusal = session._entry_refusal("e1", RuntimeError("the disk went away"))  # that write's answer
    answered.set_result(None)
    assert refusal["frame"]["error"]["code"] == str(ErrorCode.SERVER_ERROR)
    assert isinstance(await call, RuntimeError)

    later = sessions.Carried(session, [])  # the session was told; this call waits for nothing failed
    assert await later.answered() is None
