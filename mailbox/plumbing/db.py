"""Where a server process runs its synchronous database work.

``to_db_thread(fn)`` has the call shape of Channels' ``database_sync_to_async``
(``await to_db_thread(fn)(*args)``; a different name, because it is not that
helper), but every call runs on one small, fixed pool of threads per process, and
each of those threads keeps its database connection for the life of the
process. Two things this fixes (docs/performance.md has the profiles):

- Channels' helper closes the connection after every call when
  ``CONN_MAX_AGE`` is 0, and Django gives every HTTP request a thread of its
  own: each ``send_message`` and each history entry paid for a new connection
  (milliseconds on PostgreSQL, the WAL pragmas again on SQLite).
- Every request thread was another SQLite writer polling for the one write
  lock. On SQLite the pool is a single thread, so the process's writes queue
  in order instead of polling; on PostgreSQL it is a few threads, so requests
  and websocket consumers share the same bounded set of connections and
  neither starves the other.

A connection that raised a database error is closed after that call, and the
next call on that thread opens a fresh one.
"""
import asyncio
import contextlib
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connection, connections, transaction

from mailbox.plumbing.writer import Writer
from mailbox.plumbing import outage

_executors: dict[str, ThreadPoolExecutor] = {}
_sizes: dict[str, int] = {}  # threads per executor, for close_all
_executors_lock = threading.Lock()
_calling = threading.local()

# The heartbeat has a thread of its own: a process whose pool is busy is slow,
# not dead, and must not be reaped for it (docs/deployment.md, PROCESS_TIMEOUT).
# "writer": the writer's own thread, for ORM work that belongs in order with its batches.
LANES = ("pool", "heartbeat", "writer")


def threads(lane: str = "pool") -> int:
    if lane != "pool":
        return 1
    configured = settings.STEERBOARD["DB_THREADS"]
    if configured > 0:
        return configured
    return 1 if connections["default"].vendor == "sqlite" else 8


def executor(lane: str = "pool"):
    if lane not in LANES:
        raise ValueError(f"no database lane {lane!r}; there are {LANES}")
    if lane == "writer":
        return writer()
    pool = _executors.get(lane)
    if pool is None:
        with _executors_lock:
            pool = _executors.get(lane)
            if pool is None:
                if lane == "pool" and _pool_is_writer():
                    pool = _executors[lane] = _writer_new()
                    _sizes[lane] = 1
                else:
                    _sizes[lane] = threads(lane)
                    pool = _executors[lane] = ThreadPoolExecutor(_sizes[lane], thread_name_prefix=f"steerboard-db-{lane}")
    return pool


def _pool_is_writer() -> bool:
    """On SQLite the writer is the process's one database thread: one writer, in order."""
    return threads("pool") == 1 and connections["default"].vendor == "sqlite"


# What the writer runs around a batch of jobs (its transaction, pipeline and end-of-batch
# flush: mailbox/engine/hot_sql.py), handed over by mailbox/apps.py when the app is ready. The hot
# path's SQL sits above this module (its records ring the dashboards through events, which
# runs its own database work here), so this module is given it rather than importing it.
_writer_parts: dict | None = None


def writer_parts_install(*, flush, pipeline, transaction_of, observe=None) -> None:
    global _writer_parts
    _writer_parts = {"flush": flush, "pipeline": pipeline, "transaction_of": transaction_of, "observe": observe}


def _writer_new():
    if _writer_parts is None:
        raise RuntimeError("the writer is built once the mailbox app is ready (mailbox/apps.py installs its parts)")
    return Writer("steerboard-db-writer", after_call=_keep_connections, **_writer_parts)


def writer():
    """The process's writer (mailbox/plumbing/writer.py): the pool itself on SQLite, a thread of its own on PostgreSQL."""
    found = _executors.get("writer")
    if found is not None:
        return found
    if _pool_is_writer():  # looked up once: the next call finds it under "writer" too
        found = executor("pool")
        with _executors_lock:
            _executors.setdefault("writer", found)
        return found
    with _executors_lock:
        found = _executors.get("writer")
        if found is None:
            found = _executors["writer"] = _writer_new()
            _sizes["writer"] = 1
    return found


def _keep_connections() -> None:
    """After a call: keep this thread's connections open, unless the call hit a
    database error; then close it, and the next call opens a fresh one (cheaper
    and surer than asking a connection whether it still works: SQLite's always
    says yes)."""
    for each in connections.all(initialized_only=True):
        each.close_at = None  # CONN_MAX_AGE is for request threads; this one lives on
        if each.errors_occurred and not each.in_atomic_block:
            try:
                each.close()
            except Exception:
                each.connection = None
            each.errors_occurred = False
        else:
            each.close_if_unusable_or_obsolete()


def _connections_fresh() -> None:
    """Before a call: when the database went away since this thread last ran (or a
    connection was found broken), drop the connection it keeps, which may be dead
    (a restarted server closed it). Otherwise the first call on each thread after a
    restart would fail, one per thread. An integer comparison the rest of the time."""
    generation = outage.database.generation
    if getattr(_calling, "generation", generation) != generation:
        for each in connections.all(initialized_only=True):
            if not each.in_atomic_block:
                try:
                    each.close()
                except Exception:
                    each.connection = None
    _calling.generation = generation


class DatabaseThreads:
    """The call shape of Channels' ``database_sync_to_async`` (``await
    DatabaseThreads(fn)(*args)``), run on this module's threads through asgiref's
    public ``SyncToAsync(..., executor=...)``. Each call records which event loop
    waits for it (``calling_loop``) and keeps or refreshes the thread's connection
    around ``fn``."""

    def __init__(self, func, *, lane: str = "pool"):
        if lane not in LANES:
            raise ValueError(f"no database lane {lane!r}; there are {LANES}")
        self.func = func
        self.lane = lane
        functools.update_wrapper(self, func)

    async def __call__(self, *args, **kwargs):
        call = functools.partial(_on_database_thread, asyncio.get_running_loop(), self.func)
        return await SyncToAsync(call, thread_sensitive=False, executor=executor(self.lane))(*args, **kwargs)


def _on_database_thread(loop, func, *args, **kwargs):
    _calling.loop = loop
    _connections_fresh()
    try:
        return func(*args, **kwargs)
    finally:
        _calling.loop = None
        _keep_connections()


def calling_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop waiting for the database call running on this thread, if any."""
    return getattr(_calling, "loop", None)


to_db_thread = DatabaseThreads


def close_all(timeout: float = 30) -> None:
    """Close the connections every database thread holds (tests, before the test database is dropped).

    One closing call per thread: each waits at a barrier until all are running,
    so no thread takes two of them and none is left out."""
    with _executors_lock:
        # SQLite's writer is the pool itself, found under both names: closed once.
        pools = list({id(pool): (pool, _sizes.get(lane, 1)) for lane, pool in reversed(_executors.items())}.values())
        _executors.clear()
    for pool, size in pools:
        barrier = threading.Barrier(size)

        def close_here() -> None:
            connections.close_all()
            barrier.wait(timeout)

        for future in [pool.submit(close_here) for _ in range(size)]:
            future.result(timeout)
        pool.shutdown(wait=True)


@contextlib.contextmanager
def read_snapshot():
    """Several reads that see one moment of the database, for a page that shows
    a message in exactly one state column while deliveries commit around it.

    PostgreSQL: a READ ONLY, REPEATABLE READ transaction (READ COMMITTED gives
    each statement a newer snapshot). SQLite: a deferred read transaction,
    which WAL keeps on one snapshot without blocking writers (``atomic()``
    would BEGIN IMMEDIATE here and take the write lock for the whole read).
    Inside an enclosing transaction (tests) the reads just join it. Only reads
    belong inside: on SQLite Django does not know of the transaction, so an
    ``atomic()`` in the body would fail to BEGIN."""
    if connection.in_atomic_block:
        yield
    elif connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    else:  # SQLite, the only other database the project runs on
        connection.ensure_connection()
        raw = connection.connection
        if raw.in_transaction:  # already in one (Django does not know of it): read there
            yield
            return
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            # Nothing was written; this only ends the read. SQLite may already have
            # ended it (after some errors): then there is nothing to end, and the
            # body's own error is the one that propagates.
            if raw.in_transaction:
                raw.commit()


def wal_checkpoint() -> None:
    """SQLite: a passive checkpoint (it waits for no reader or writer)."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
