"""mailbox/plumbing/db.py: the process's database threads keep their connections."""
import asyncio
import threading

import pytest
from django.db import connection

from mailbox.plumbing import db
from mailbox.plumbing.db import to_db_thread
from mailbox.plumbing.writer import Job

pytestmark = pytest.mark.django_db(transaction=True)


def _where() -> tuple[int, int]:
    connection.ensure_connection()
    return threading.get_ident(), id(connection.connection)


async def test_a_database_thread_keeps_its_connection_between_calls():
    seen = {await to_db_thread(_where)() for _ in range(3 * db.threads())}
    threads = {thread for thread, _ in seen}
    assert len(threads) <= db.threads()
    # one connection per thread, opened once: no call paid for a new connection
    assert len(seen) == len(threads)


async def test_a_broken_connection_is_replaced_by_the_next_call():
    def break_it():
        connection.ensure_connection()
        connection.connection.close()  # what a database restart does to it
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    with pytest.raises(Exception):
        await to_db_thread(break_it)()

    def select_one():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone()[0]

    # Every thread answers again (on SQLite there is one; on PostgreSQL the
    # broken one is among the pool's).
    for _ in range(2 * db.threads()):
        assert await to_db_thread(select_one)() == 1


async def test_the_threads_are_one_on_sqlite_and_several_on_postgresql():
    expected = 1 if connection.vendor == "sqlite" else 8
    assert db.threads() == expected


class _Select(Job):
    """A job that reads one row in the batch's transaction."""

    def __init__(self, fail_after_commit: bool = False):
        self.fail_after_commit = fail_after_commit

    def execute(self, batch):
        with batch.db.cursor() as cursor:
            cursor.execute("SELECT 1")
            self.result = cursor.fetchone()[0]

    def committed(self):
        if self.fail_after_commit:  # a fault injected where nothing is expected to raise
            raise RuntimeError("injected: failing after the commit")


async def test_the_writer_outlives_a_failure_outside_a_batchs_transaction():
    writer = db.writer()
    with pytest.raises(RuntimeError, match="injected"):
        await asyncio.wait_for(writer.run(_Select(fail_after_commit=True)), 10)
    # The thread goes on: a later job commits and is answered (before, every job after
    # waited for good on a dead thread).
    assert await asyncio.wait_for(writer.run(_Select()), 10) == 1
