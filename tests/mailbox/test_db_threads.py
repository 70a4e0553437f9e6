"""mailbox/db.py: the process's database threads keep their connections."""
import threading

import pytest
from django.db import connection

from mailbox import db
from mailbox.db import to_db_thread

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
