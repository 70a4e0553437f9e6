"""mailbox/selectors.py: the reads of the mailbox for operators, the dashboard,
recovery and wait_agent, on the real database.

The operator's filters over REST are tests/mailbox/test_operator_console.py's;
these are what the other callers rely on: pending messages in seq order, counts
without a scan, pages that never skip or repeat, and who needs a host."""
import pytest
from django.contrib.auth import get_user_model

from mailbox import selectors
from mailbox.engine import hot_path, queue_adapter
from mailbox.members import sessions, usage
from tests.support.sends import message_send
from mailbox.models import MessageState
from teams.errors import ErrorCode, TeamError
from teams.models import SessionState
from teams.services import member_spawn, task_create, team_create

pytestmark = pytest.mark.django_db(transaction=True)


def _team(name="selectors", teammates=("worker",)):
    team, lead, _, _ = team_create(name=name)
    members = [member_spawn(lead=lead, name=n, description="d", prompt="") for n in teammates]
    return team, lead, members


def _send(lead, target: str, content: str):
    return message_send(sender=lead, target_name=target, content=content)[0]


def _one_of_each_state(team, lead, worker):
    """seq 1 delivered, seq 2 accepted, seq 3 queued (the worker has no session again)."""
    first, second = _send(lead, "worker", "one"), _send(lead, "worker", "two")
    sessions.session_hello(member_id=worker.pk, state=SessionState.RUNNING, channel="selectors-1")
    entry = {"id": "e-1", "kind": "user_message", "text": "one",
             "source": {"kind": "team-message", "message_id": first.id, "sender": "lead"}}
    hot_path.entry_record(member=worker, entry=entry)
    sessions.session_closed(member_id=worker.pk, channel="selectors-1")
    third = _send(lead, "worker", "three")
    return first, second, third


def test_pending_messages_come_in_seq_order_by_state_and_the_counts_need_no_scan():
    team, lead, (worker,) = _team()
    first, second, third = _one_of_each_state(team, lead, worker)
    worker.refresh_from_db()

    assert [m.id for m in selectors.pending_of(target=worker)] == [second.id, third.id]
    assert [m.id for m in selectors.pending_of(target=worker, states=(MessageState.QUEUED,))] == [third.id]
    assert [m.id for m in selectors.pending_of(target=worker, limit=1)] == [second.id]
    assert [m.sender.name for m in selectors.pending_of(target=worker)] == ["lead", "lead"]

    counts = selectors.member_counts(team=team)
    assert counts[worker.pk] == {"queued": 1, "accepted": 1, "delivered": 1, "cancelled": 0}
    assert counts[lead.pk] == {"queued": 0, "accepted": 0, "delivered": 0, "cancelled": 0}
    summary = usage.team_summary(team=team)
    by_name = {m["name"]: m for m in summary["members"]}
    assert summary["team"] == "selectors"
    assert {k: by_name["worker"][k] for k in ("queued", "accepted", "delivered", "cancelled")} == counts[worker.pk]


def test_message_pages_are_newest_first_and_never_skip_or_repeat_and_a_retry_takes_the_oldest_first():
    team, lead, (worker, other) = _team(teammates=("worker", "other"))
    sent = [_send(lead, "worker" if i % 2 else "other", f"m{i}") for i in range(7)]

    seen, cursor = [], None
    while True:
        page, cursor = selectors.message_list(team=team, cursor=cursor, limit=3)
        assert len(page) <= 3
        seen += [m.id for m in page]
        if cursor is None:
            break
    assert seen == [m.id for m in reversed(sent)]
    only_worker, _ = selectors.message_list(team=team, target="worker")
    assert [m.id for m in only_worker] == [m.id for m in reversed(sent) if m.target_id == worker.pk]
    assert selectors.message_list(team=team, target="nobody") == ([], None)
    with pytest.raises(TeamError) as refused:
        selectors.message_list(team=team, state="lost")
    assert refused.value.code == ErrorCode.VALIDATION_ERROR

    assert [m.id for m in selectors.messages_undelivered(team=team)] == [m.id for m in sent]
    assert [m.id for m in selectors.messages_undelivered(team=team, target="other")] == [
        m.id for m in sent if m.target_id == other.pk
    ]
    out = selectors.message_out(selectors.message_get(team=team, message_id=sent[0].id))
    assert (out["sender"], out["target"], out["content"], out["thread_id"]) == ("lead", "other", "m0", sent[0].id)


def test_a_message_of_another_team_is_not_found():
    team, lead, _ = _team()
    elsewhere, _, _ = _team(name="elsewhere")
    message = _send(lead, "worker", "ours")
    assert selectors.message_get(team=team, message_id=message.id).content == "ours"
    with pytest.raises(TeamError) as refused:
        selectors.message_get(team=elsewhere, message_id=message.id)
    assert refused.value.code == ErrorCode.NOT_FOUND


def test_an_inbox_page_continues_after_its_cursor_to_the_end():
    team, lead, (worker,) = _team()
    sent = [_send(lead, "worker", f"m{i}") for i in range(5)]
    page, cursor = selectors.inbox_page(member=worker, limit=2)
    assert [m.seq for m in page] == [1, 2] and cursor == 2
    page, cursor = selectors.inbox_page(member=worker, after_seq=cursor, limit=2)
    assert [m.seq for m in page] == [3, 4] and cursor == 4
    page, cursor = selectors.inbox_page(member=worker, after_seq=cursor, limit=2)
    assert [m.id for m in page] == [sent[4].id] and cursor is None


def test_who_needs_a_host_a_prompt_waiting_or_a_turn_that_died_midway():
    team, lead, (waiting, mid_turn, finished) = _team(teammates=("waiting", "mid-turn", "finished"))
    other, _, (stranger,) = _team(name="other", teammates=("stranger",))
    author = get_user_model().objects.create_user(username="op")
    queue_adapter.prompt_submit(team_id=team.pk, target_name="waiting", author=author, content="hello?")
    queue_adapter.prompt_submit(team_id=other.pk, target_name="stranger", author=author, content="hello?")
    assert selectors.members_awaiting_prompt(team_id=team.pk) == [waiting.pk]
    assert selectors.members_awaiting_prompt() == sorted([waiting.pk, stranger.pk])

    for member, marks in ((mid_turn, ["turn_start", "turn_end", "turn_start"]), (finished, ["turn_start", "turn_end"])):
        sessions.session_hello(member_id=member.pk, state=SessionState.RUNNING, channel=f"{member.name}-1")
        for i, kind in enumerate(marks):
            hot_path.entry_record(member=member, entry={"id": f"{member.name}-{i}", "kind": kind})
    assert selectors.members_mid_turn(team_id=team.pk) == []  # both have a session
    for member in (mid_turn, finished):
        sessions.session_closed(member_id=member.pk, channel=f"{member.name}-1")
    assert selectors.members_mid_turn(team_id=team.pk) == [mid_turn.pk]


def test_a_wait_snapshot_changes_with_a_task_a_message_to_the_caller_or_a_peers_status():
    team, lead, (worker,) = _team()
    assert selectors.wait_snapshot(lead)[0] is True  # being provisioned: someone to wait for
    sessions.session_hello(member_id=worker.pk, state=SessionState.IDLE, channel="wait-1")
    active, seen = selectors.wait_snapshot(lead)
    assert active is False  # an idle peer: nobody to wait for
    sessions.session_status(member_id=worker.pk, state=SessionState.RUNNING, channel="wait-1")
    active, after_running = selectors.wait_snapshot(lead)
    assert active is True and after_running != seen
    _send(lead, "worker", "not to the caller")
    assert selectors.wait_snapshot(lead)[1] == after_running
    _send(worker, "lead", "to the caller")
    after_message = selectors.wait_snapshot(lead)[1]
    assert after_message != after_running
    task_create(member=worker, subject="s", description="d", blocked_by=[], write_scopes=[])
    assert selectors.wait_snapshot(lead)[1] != after_message
    sessions.session_closed(member_id=worker.pk, channel="wait-1")
