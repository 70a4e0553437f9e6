"""What reading the members' activity costs (mailbox/members/activity.py), and the rule's order where a
pending human ask meets the other states. The states themselves, from real sessions over the
websocket, are tests/mailbox/test_activity.py's."""
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mailbox.engine import hot_path
from mailbox.members import activity, usage
from teams import services as team_services
from teams.models import Member, Phase, SessionState

pytestmark = pytest.mark.django_db


def _team(name: str, members: int, entries: int) -> list[Member]:
    _, lead, _, _ = team_services.team_create(name=name)
    roster = [lead] + [
        team_services.member_spawn(lead=lead, name=f"m{i}", description="d", prompt="") for i in range(members - 1)
    ]
    for member in roster:
        for n in range(entries):
            hot_path.entry_record(member=member, entry={"id": f"e{n}", "kind": "assistant_text", "turn_id": "t", "text": "x"})
        if entries:
            hot_path.entry_record(member=member, entry={
                "id": "call", "kind": "tool_call", "turn_id": "t", "call_id": "c", "tool": "team_task_list", "arguments": {}})
    Member.objects.filter(pk__in=[m.pk for m in roster]).update(
        phase=Phase.ACTIVE, session_state=SessionState.RUNNING, status_changed_at=timezone.now() - timedelta(hours=1))
    return list(Member.objects.filter(pk__in=[m.pk for m in roster]).order_by("id"))


def test_two_reads_find_every_members_latest_entry_and_asks_whatever_the_roster_or_its_histories():
    def measure(name, members, entries):
        roster = _team(name, members, entries)
        with CaptureQueriesContext(connection) as queries:
            found = activity.members_activity(roster)
        return found, roster, len(queries)

    small, _, small_queries = measure("small", 1, 0)
    large, roster, large_queries = measure("large", 8, 300)
    assert small_queries == large_queries == 2  # the latest entries, and the pending asks (ask_human)
    assert [large[m.pk].detail for m in roster] == ["team_task_list"] * 8
    # Running for an hour with nothing recorded: stalled since its session said so.
    assert next(iter(small.values())).detail == "no history entry since its session reported running, 3600 s ago"


def test_the_latest_entry_is_found_through_the_member_index_not_a_walk_of_the_history():
    roster = _team("plan", 2, 50)
    with CaptureQueriesContext(connection) as captured:
        activity.latest_entries(member_ids=[m.pk for m in roster])
    sql = captured.captured_queries[0]["sql"]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "history_member_order" in plan, plan
            assert "SCAN mailbox_historyentry" not in plan, plan
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql)
            plan = " | ".join(row[0] for row in cursor.fetchall())
            assert "history_member_order" in plan, plan


def test_list_agents_reads_the_activity_once_for_the_whole_roster():
    roster = _team("roster", 8, 3)
    with CaptureQueriesContext(connection) as queries:
        usage.roster(team_id=roster[0].team_id, members=roster)
    assert sum("mailbox_historyentry" in q["sql"] for q in queries.captured_queries) == 1


def _member(phase=Phase.ACTIVE, session=SessionState.RUNNING, changed=None) -> Member:
    return Member(name="m", phase=phase, session_state=session, status_changed_at=changed or timezone.now())


def test_a_pending_ask_is_the_reason_unless_the_member_is_busy_or_gone():
    now = timezone.now()
    ask = activity.PendingAsk(ask_id="ask-1", asked_at=now - timedelta(seconds=30), question="Deploy to production?")
    quiet = now - timedelta(seconds=600)

    def of(member, latest):
        return activity.activity_of(member, latest=latest, ask=ask, start_failure=None, now=now, stall_after=120)

    waiting = activity.Latest(kind="tool_call", at=now, tool="await_message")
    tool = activity.Latest(kind="tool_call", at=now, tool="send_message")
    stale = activity.Latest(kind="tool_call", at=quiet, tool="send_message")
    failed_turn = activity.Latest(kind="turn_end", at=now, reason="error", error="boom")
    for member, latest in [
        (_member(), waiting),
        (_member(changed=quiet), stale),
        (_member(session=SessionState.IDLE), None),
        (_member(session=SessionState.INACTIVE), None),
        (_member(session=SessionState.IDLE), failed_turn),
    ]:
        found = of(member, latest)
        assert (found.state, found.since, found.detail) == ("waiting_human", ask.asked_at, "Deploy to production?")
    assert of(_member(), tool).state == "working"
    assert of(_member(changed=now), None).detail == "thinking"
    assert of(_member(phase=Phase.RETIRED, session=SessionState.INACTIVE), None).state == "retired"
    assert of(_member(phase=Phase.FAILED, session=SessionState.INACTIVE), None).state == "failed"



def test_a_json_null_or_a_missing_field_reads_as_none_on_both_databases():
    roster = _team("nulls", 3, 0)
    calls = [{"sender": None}, {}, {"sender": "m0"}]
    for member, arguments in zip(roster, calls):
        hot_path.entry_record(member=member, entry={
            "id": "w", "kind": "tool_call", "turn_id": "t", "call_id": "c", "tool": "await_message", "arguments": arguments})
    found = activity.members_activity(roster)
    assert [found[m.pk].detail for m in roster] == [
        "await_message from any member", "await_message from any member", "await_message from m0"]
