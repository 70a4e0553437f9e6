"""PostgreSQL: the writer's batches on the event loop's own asyncio connection, with no
thread between the caller and the database (``STEERBOARD["ASYNC_WRITER"]``).

The same jobs, the same group commit as mailbox/plumbing/writer.py, and the same
statements (mailbox/engine/hot_sql.py ``loop_batch``): jobs queue on the event loop;
while a batch is in flight the next ones wait, and the waiting jobs (up to
``MAX_BATCH``) are the next batch. A batch sorts its jobs in lock order, sends BEGIN and
each job's piped statement in one pipeline, hands each job its row, sends what the jobs
left for the batch's end and COMMIT, then runs each job's ``committed`` and ``finish``
and answers it, in submission order, on the loop. One batch at a time per loop, as on
the writer thread, so a target's sends keep their seq order and pushes follow it.

What a batch cannot do on the loop it hands to the writer thread, whole, and waits for
it there before its next batch (the order stays one batch after another): a job without
a piped statement (a reply, which first looks up its thread; several entries in one job;
recovery's delivered mark), a job whose row asks for a statement of its own (a refusal's
reason, an undone key claim: ``OffLoop``), and any failure (rolled back here; the
thread's own handling runs it again: a database out of reach is retried once on a fresh
connection, then every job fails with it; a job that broke the transaction fails alone).

One connection per event loop (one in a daphne process), opened on the first batch
and again after a failure or a database outage (``outage.database.generation``).
"""
import asyncio
import collections
import logging
import time
import weakref
from collections.abc import Awaitable, Callable

from mailbox.plumbing import outage, tracing
from mailbox.plumbing.writer import MAX_BATCH, Batch, Job, OffLoop, Writer, finish_all
from teams.errors import TeamError

log = logging.getLogger(__name__)


class _OnLoop:
    """One event loop's queue, connection and the task that drains the queue."""

    def __init__(self):
        self.queue: collections.deque[Job] = collections.deque()
        self.draining: asyncio.Task | None = None
        self.conn = None
        self.generation = -1


class LoopWriter:
    def __init__(
        self,
        *,
        thread: Writer,
        run_batch: Callable[[object, list[Job], Batch], Awaitable[None]],
        connect: Callable[[], Awaitable[object]],
        observe: Callable[[int, float], None] | None = None,
    ):
        self.thread = thread  # what a batch cannot do on the loop goes here
        self._run_batch = run_batch
        self._connect = connect
        self._observe = observe
        self._loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _OnLoop]" = weakref.WeakKeyDictionary()
        self.batches = 0  # committed on the loop
        self.handed = 0  # handed to the writer thread

    # --- the callers' side (as Writer's) -------------------------------------------------------
    def run(self, job: Job) -> asyncio.Future:
        return self.run_all([job])[0]

    def run_all(self, jobs: list[Job]) -> list[asyncio.Future]:
        loop = asyncio.get_running_loop()
        link = tracing.current_link() if tracing.enabled else None
        for job in jobs:
            job.loop = loop
            job.future = loop.create_future()
            if link is not None:
                job.trace_link = link
        here = self._loops.get(loop)
        if here is None:
            here = self._loops[loop] = _OnLoop()
        here.queue.extend(jobs)
        if here.draining is None:
            here.draining = loop.create_task(self._drain(here))
        return [job.future for job in jobs]

    # --- on the loop ---------------------------------------------------------------------------
    async def _drain(self, here: _OnLoop) -> None:
        try:
            while here.queue:
                jobs = [here.queue.popleft() for _ in range(min(MAX_BATCH, len(here.queue)))]
                try:
                    await self._commit(here, jobs)
                except BaseException as exc:  # noqa: BLE001 - as the thread's loop: fail this batch, go on
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    log.error("the loop's writer failed outside a batch; its %d jobs fail", len(jobs), exc_info=True)
                    for job in jobs:
                        job.error = job.error or exc
                        job._resolve()
        finally:
            here.draining = None

    async def _commit(self, here: _OnLoop, jobs: list[Job]) -> None:
        if await self._on_loop(here, jobs):
            for job in jobs:
                if job.error is None:
                    job.committed()
        else:
            self.handed += 1
            await asyncio.wrap_future(self.thread.submit(self.thread.commit_here, jobs))
        finish_all(jobs)

    async def _on_loop(self, here: _OnLoop, jobs: list[Job]) -> bool:
        """The batch committed on the loop's connection (True), or left for the writer thread."""
        from django.utils import timezone

        generation = outage.database.generation
        if here.conn is not None and (here.conn.closed or here.generation != generation):
            await _closed(here)
        try:
            if here.conn is None:
                here.conn = await self._connect()
                here.generation = generation
            ordered = sorted(jobs, key=_lock_order)
            started = time.perf_counter()
            if tracing.enabled:
                with tracing.batch_span(jobs, database="postgresql") as span:
                    await self._run_batch(here.conn, ordered, Batch(timezone.now()))
                    tracing.batch_failed(span, [job.error for job in jobs if job.error is not None
                                                and not isinstance(job.error, TeamError)])
            else:
                await self._run_batch(here.conn, ordered, Batch(timezone.now()))
        except OffLoop:
            return False
        except Exception as exc:
            await _closed(here)  # a broken connection is closed; the next batch opens a fresh one
            if outage.unavailable(exc) == "database":
                outage.database.suspect()
            else:
                log.warning("a batch of %d failed on the loop; the writer thread runs it again", len(jobs),
                            exc_info=True)
            return False
        self.batches += 1
        outage.database.ok()
        if self._observe is not None:
            self._observe(len(jobs), time.perf_counter() - started)
        return True

    # --- closing ---------------------------------------------------------------------------------
    def close_all(self, timeout: float = 30) -> None:
        """Close every loop's connection (tests, before the test database is dropped): on its
        loop when that runs in another thread, else the socket at once."""
        for loop, here in list(self._loops.items()):
            conn, here.conn = here.conn, None
            if conn is None or conn.closed:
                continue
            if loop.is_running() and not _running_here(loop):
                try:
                    asyncio.run_coroutine_threadsafe(conn.close(), loop).result(timeout)
                    continue
                except Exception:
                    log.warning("closing the loop writer's connection on its loop failed", exc_info=True)
            conn.pgconn.finish()
        self._loops.clear()


async def _closed(here: _OnLoop) -> None:
    conn, here.conn = here.conn, None
    if conn is not None and not conn.closed:
        try:
            await conn.close()
        except Exception:
            conn.pgconn.finish()


def _running_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _lock_order(job: Job) -> tuple:
    return job.lock_order
