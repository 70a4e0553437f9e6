"""The undelivered messages' partial indexes (mailbox/models.py ``UNDELIVERED``, issue 32 item 6):
every read of pending or cancelled messages goes through them, on both databases.

SQLite uses a partial index only for a query that repeats the index's condition (a bound value
counts), so a read that forgets ``UNDELIVERED`` walks a target's whole inbox or the whole table
instead: about 100 ms a query at a million stored messages, on the thread the websockets share.
PostgreSQL proves the condition from any state filter but delivered; there the plan is read with
sequential scans off, as a table this small is otherwise read whole."""
import pytest
from django.db import connection
from django.utils import timezone

from frontend import attention
from frontend import selectors as frontend_selectors
from mailbox import selectors
from mailbox.engine import hot_sql
from mailbox.models import LeadLogRecord, MessageState, TeamMessage
from mailbox.plumbing import metrics
from mailbox.operations import recovery
from teams.models import Member, Phase, SessionState
from teams.services import member_spawn, team_create
from tests.support.sends import message_send, messages_store_delivered

pytestmark = pytest.mark.django_db

DELIVERED = 5000


class Executed:
    """Every statement the code ran, with its parameters (bound, as the database saw them)."""

    def __init__(self):
        self.statements: list[tuple[str, tuple]] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, params))
        return execute(sql, params, many, context)


def _plan(sql: str, params) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return " | ".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return " | ".join(row[0].strip() for row in cursor.fetchall())


def _message_plans(read) -> list[str]:
    executed = Executed()
    with connection.execute_wrapper(executed):
        read()
    return [
        _plan(sql, params)
        for sql, params in executed.statements
        if sql.lstrip().upper().startswith("SELECT") and "mailbox_teammessage" in sql
    ]


@pytest.fixture
def team():
    team, lead, _, _ = team_create(name="partial")
    for name in ("w1", "w2"):
        member_spawn(lead=lead, name=name, description="d", prompt="")
    for n in range(3):
        message_send(sender=lead, target_name="w1", content=f"waits {n}")  # w1 has no session: queued
    # Many delivered ones (which the partial indexes do not hold), and the planners' statistics:
    # on a table of a few rows PostgreSQL's costs pick any index.
    w2 = Member.objects.get(team=team, name="w2")
    messages_store_delivered(team_id=team.pk, sender_id=lead.pk, target_id=w2.pk, count=DELIVERED)
    Member.objects.filter(pk=w2.pk).update(next_seq=DELIVERED + 1, phase=Phase.ACTIVE, session_state=SessionState.RUNNING)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return team


READS = {
    "pending_of": lambda team: selectors.pending_of(target=Member.objects.get(team=team, name="w1")),
    "member_counts": lambda team: selectors.member_counts(team=team),
    "message_list, a pending state": lambda team: selectors.message_list(team=team, state=MessageState.QUEUED),
    "messages_undelivered": lambda team: selectors.messages_undelivered(team=team),
    "redelivery": lambda team: recovery._redelivery_due(timezone.now()),
    "reconcile": lambda team: recovery.messages_reconcile(),
    "teams_overview": lambda team: frontend_selectors.teams_overview(),
    "team_attention": lambda team: attention.team_attention(team=team),
    "teams_attention_counts": lambda team: attention.teams_attention_counts(team_ids=[team.pk]),
    "metrics gauges": lambda team: list(metrics._gauges({team.pk: team.name})),
}


@pytest.mark.parametrize("read", READS, ids=list(READS))
def test_every_read_of_undelivered_messages_uses_their_partial_index(team, read):
    plans = _message_plans(lambda: READS[read](team))
    assert plans, "the read made no query of the messages"
    assert any("message_undelivered_" in plan for plan in plans), plans
    for plan in plans:
        assert "SCAN mailbox_teammessage" not in plan, plan  # SQLite: a walk of every message


def test_the_hot_paths_mailbox_counts_use_the_partial_index(team):
    # The SQL the writer's send runs (mailbox/engine/hot_sql.py): the target's pending count, in one
    # statement with its claim on SQLite, and the count a refusal reports.
    sql = hot_sql.statements(connection)
    w1 = Member.objects.get(team=team, name="w1")
    claim = [team.pk, "w1", 1000, None]
    for statement, params in ((sql.target_pending, [w1.pk]), (sql.target_claim, claim)):
        plan = _plan(statement.replace("?", "%s"), params)
        assert "message_undelivered_target" in plan, plan
        assert "SCAN mailbox_teammessage" not in plan, plan


def test_message_ids_have_no_like_index():
    # Django adds one to a text key on PostgreSQL; nothing matches ids by pattern, and with
    # random ids every send wrote a random page of it (migration 0013 drops them).
    with connection.cursor() as cursor:
        for table in (TeamMessage._meta.db_table, LeadLogRecord._meta.db_table):
            indexes = connection.introspection.get_constraints(cursor, table)
            assert indexes, table
            assert [name for name in indexes if name.endswith("_like")] == []
