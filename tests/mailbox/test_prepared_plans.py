"""The writer's prepared statements are planned again as its work grows (mailbox/engine/hot_sql.py,
``REPLAN_FIRST``): a generic plan kept from a new database's empty tables walked a target's
whole mailbox to find one message by its id. Real PostgreSQL, the test database's connection."""
import psycopg
import pytest
from django.db import connection

from mailbox.engine import hot_sql
from tests.support.live import postgres_run_only

PROBE = "SELECT %s::int AS n"


def _prepared(raw) -> int:
    # Not prepared itself (psycopg would prepare a query run five times).
    found = raw.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::int AS n%%'",
                        prepare=False)
    return found.fetchone()[0]


def _probe(raw, n: int) -> int:
    with psycopg.Cursor(raw) as cursor:
        cursor.execute(PROBE, (n,), prepare=True)
        return cursor.fetchone()[0]


@postgres_run_only("prepared statements and their plans are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_writers_connection_forgets_its_prepared_statements_each_time_its_jobs_double():
    connection.ensure_connection()
    raw = connection.connection
    hot_sql._prepared_statements_on(raw)
    assert _probe(raw, 1) == 1 and _prepared(raw) == 1

    hot_sql._jobs_counted(raw, hot_sql.REPLAN_FIRST - 1)
    assert not hot_sql._plans_renewed(raw) and _prepared(raw) == 1
    hot_sql._jobs_counted(raw, 1)
    assert hot_sql._plans_renewed(raw)
    assert _prepared(raw) == 0, "the server kept the statements planned for the smaller tables"

    # psycopg forgot its names with the server: the statement is prepared again (run by a
    # name the server no longer has, it would fail), and planned for the tables as they are.
    assert _probe(raw, 2) == 2 and _prepared(raw) == 1

    # The next time is once the jobs have doubled again: not one job sooner.
    hot_sql._jobs_counted(raw, hot_sql.REPLAN_FIRST - 1)
    assert not hot_sql._plans_renewed(raw) and _prepared(raw) == 1
    hot_sql._jobs_counted(raw, 1)
    assert hot_sql._plans_renewed(raw) and _prepared(raw) == 0


@postgres_run_only("the writer's batches on PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_batch_after_the_doubling_runs_on_freshly_planned_statements():
    """Through the writer's own batch transaction: the renewal happens before BEGIN, where
    psycopg can see it, and the batch's statements still run."""
    from mailbox.plumbing.writer import Batch

    connection.ensure_connection()
    raw = connection.connection
    hot_sql._prepared_statements_on(raw)
    _probe(raw, 1)
    hot_sql._jobs_counted(raw, hot_sql.REPLAN_FIRST)
    batch = Batch(None)
    with hot_sql.hot_transaction(batch):
        assert _probe(raw, 3) == 3
    assert _prepared(raw) == 1  # deallocated before the batch, prepared again inside it
    assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
