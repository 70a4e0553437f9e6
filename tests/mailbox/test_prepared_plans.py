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


def _named(statements: hot_sql.Statements) -> dict[str, str]:
    return {name: text for name, text in vars(statements).items() if isinstance(text, str) and "%(" in text}


def test_a_statement_in_its_raw_form_is_what_psycopg_would_have_sent():
    """The writer sends its statements with named parameters as PostgreSQL's own ``$n`` text
    (``hot_sql.raw_form``: psycopg parses a statement longer than 4 096 bytes on every
    execute, and the send's are). Every one of them reads, number for number and parameter
    for parameter, as psycopg's own conversion of it."""
    from psycopg._queries import PostgresQuery
    from psycopg.adapt import Transformer

    named = _named(hot_sql.Statements("postgresql"))
    assert {"send_piped", "send_piped_keyed", "entry_piped"} <= set(named)
    assert max(len(text.encode()) for text in named.values()) > 4096  # why the raw form exists
    for name, statement in named.items():
        text, order = hot_sql.raw_form(statement)
        params = {key: f"value of {key}" for key in order}
        psycopg_query = PostgresQuery(Transformer())
        psycopg_query.convert(statement, params)
        assert text.encode() == psycopg_query.query, name
        assert [params[key] for key in order] == [p.decode() for p in psycopg_query.params], name
        assert hot_sql.raw_form(statement) is hot_sql.raw_form(statement)  # converted once


@postgres_run_only("the driver's raw cursor is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_named_statement_runs_in_its_raw_form_with_a_parameter_used_twice():
    connection.ensure_connection()
    cursor = hot_sql._pg_execute(
        connection.connection, "SELECT %(a)s::int + %(b)s::int * %(a)s::int", {"b": 3, "a": 2}, prepare=False
    )
    assert isinstance(cursor, psycopg.RawCursor) and cursor.fetchone() == (8,)
