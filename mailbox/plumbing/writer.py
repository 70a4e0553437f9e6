"""The process's writer: one thread that makes the hot path durable, committing
whatever waits in one transaction (opportunistic group commit).

Sends (enqueue + admission) and history entries (entry + delivered) of every
request and websocket of the process are ``Job``s. The writer takes every job
waiting when it becomes free, runs them in one transaction and commits once; at
low load that is a batch of one and nothing waits for a timer. Each caller
awaits its own job. After the commit, on the event loop, each job finishes in
submission order: its pushes go out (so a target's steers leave in seq order)
and its caller is answered, never before its commit.

Inside a batch the jobs run in lock order (entries, then sends by target),
so two processes' writers on one PostgreSQL never deadlock on the members
they update, and hold those locks briefly; answers and pushes still follow
submission order.

A batch's transaction is the driver's own BEGIN/COMMIT on the thread's
connection (``hot_sql.hot_transaction``): nothing in a job uses the ORM, and
Django's atomic() bookkeeping cost as much as an empty SQLite commit ten times.

A job that refuses (``TeamError``) wrote nothing, and its neighbours commit. Any
other failure rolls the batch back and runs its jobs again one transaction
each, so one bad job never fails the others.

The writer is also an ``Executor``: on SQLite it is the process's only database
thread (mailbox/plumbing/db.py), and the ORM's calls queue behind (and between) the
batches instead of polling for SQLite's one write lock. On PostgreSQL it is a
thread of its own beside the pool; row locks order it against the rest.
"""
import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from django.db import transaction

from mailbox.plumbing import outage, tracing
from teams.errors import TeamError

log = logging.getLogger(__name__)

# A batch stops growing here: its pushes and answers wait for its commit.
MAX_BATCH = 128


class Job:
    """One unit of the hot path. ``execute`` runs on the writer thread inside the
    batch's transaction; ``finish`` runs on the caller's event loop after the
    commit, then the caller gets ``result`` (or ``error``)."""

    result = None
    error: BaseException | None = None
    # Jobs run in this order inside a batch (stably, so a target's sends keep
    # theirs): every writer takes row locks in one order, and two processes'
    # batches never wait on each other in a cycle. Entries (which lock only
    # their own message) come first, sends (which lock their target, the rows
    # other writers want too) last, so those locks are held for the shortest
    # time before the commit.
    lock_order: tuple = (0,)

    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future | None = None
    # The span under way when the job was queued, when the process traces: its batch's span
    # links to it (mailbox/plumbing/tracing.py).
    trace_link = None

    def execute(self, batch: "Batch") -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def piped(self, batch: "Batch"):
        """The job as one statement that needs no other job's answer, as
        (sql, params), for a database that pipelines a batch; None: run ``execute``."""
        return None

    def piped_result(self, row, batch: "Batch") -> None:
        """The piped statement's row, after the pipeline."""

    def committed(self) -> None:
        """On the writer thread, right after the commit (crash points live here)."""

    def finish(self) -> None:
        """On the event loop, after the commit, in submission order."""

    def _resolve(self) -> None:
        if self.future.done():  # the caller went away (cancelled)
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result)


class Batch:
    """What the jobs of one transaction share: its clock, and what they leave for its
    end, written in one statement each before the commit (the Lead-log records they
    append, the idempotency keys they claimed or those keys' results; when the process
    traces, the trace context of the messages they stored)."""

    def __init__(self, now):
        from django.db import connections

        self.now = now
        self.db = connections["default"]  # this thread's connection, looked up once
        self.now_db = self.db.ops.adapt_datetimefield_value(now)  # the clock as the database stores it
        self.log_rows: list[tuple] = []
        self.key_results: list[tuple[int, str]] = []
        self.keys_new: dict[tuple[int, str, str], tuple[str, dict]] = {}
        self.keys_live_since = None  # the oldest live idempotency key's time, worked out once (SendJob)
        self.traces: list[tuple[str, str, str | None]] = []

    def log(self, *, team_id: int, kind: str, message_id: str | None, data: str) -> None:
        self.log_rows.append((team_id, kind, message_id, data))

    def key_result(self, key_id: int, result: str) -> None:
        """A claimed idempotency key's result (JSON text), stored with the batch (PostgreSQL:
        the send's statement claimed the key's row)."""
        self.key_results.append((key_id, result))

    def key_new(self, member_id: int, tool: str, key: str, fingerprint: str, result: dict) -> None:
        """An idempotency key claimed in memory, its row inserted with the batch (SQLite: the
        batch holds the database's one write lock, so a key it found free stays free until
        its commit; a later job of the batch finds it here)."""
        self.keys_new[(member_id, tool, key)] = (fingerprint, result)

    def traced(self, message_id: str, traceparent: str, tracestate: str | None) -> None:
        """A stored message's trace context (its send's span), stored with the batch."""
        self.traces.append((message_id, traceparent, tracestate))


class _Call:
    __slots__ = ("fn", "args", "kwargs", "future")

    def __init__(self, fn, args, kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.future: concurrent.futures.Future = concurrent.futures.Future()


class Writer(concurrent.futures.Executor):
    def __init__(
        self,
        name: str,
        *,
        flush: Callable[[Batch], None],
        after_call: Callable[[], None],
        pipeline: Callable[[list, Batch], list] | None = None,
        transaction_of: Callable[[Batch], contextlib.AbstractContextManager] | None = None,
        observe: Callable[[int, float], None] | None = None,
    ):
        self.name = name
        # Told each committed batch's size and seconds (mailbox/plumbing/metrics.py's histograms).
        self._observe = observe
        self._pipeline = pipeline
        self._transaction = transaction_of or (lambda batch: transaction.atomic())
        self._items: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._flush = flush
        self._after_call = after_call
        self.batches = 0
        self.jobs = 0

    # --- the callers' side ---------------------------------------------------------------------
    def run(self, job: Job) -> asyncio.Future:
        """From an event loop: queue a job; await the answer."""
        return self.run_all([job])[0]

    def run_all(self, jobs: list[Job]) -> list[asyncio.Future]:
        """From an event loop: queue jobs in order, with one wake-up of the writer's thread."""
        loop = asyncio.get_running_loop()
        link = tracing.current_link() if tracing.enabled else None
        for job in jobs:
            job.loop = loop
            job.future = loop.create_future()
            if link is not None:
                job.trace_link = link
        self._put(*jobs)
        return [job.future for job in jobs]

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        call = _Call(fn, args, kwargs)
        self._put(call)
        return call.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)

    def _put(self, *items) -> None:
        with self._ready:
            if self._stopping:
                raise RuntimeError(f"the writer {self.name} has stopped")
            self._items.extend(items)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._ready.notify()

    # --- the writer thread --------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._items and not self._stopping:
                    self._ready.wait()
                if not self._items:
                    return
                first = self._items.popleft()
                batch = None
                if isinstance(first, Job):
                    batch = [first]
                    while self._items and isinstance(self._items[0], Job) and len(batch) < MAX_BATCH:
                        batch.append(self._items.popleft())
            if batch is None:
                self._call(first)
                continue
            try:
                self._commit(batch)
            except BaseException as exc:  # noqa: BLE001 - the thread must outlive any batch
                # Nothing above should raise; if it does, the process's writes would
                # stop for good (every later job waiting on a dead thread). Fail this
                # batch's jobs instead, loudly, and go on with the next.
                log.error("the writer failed outside a batch's transaction; its %d jobs fail", len(batch), exc_info=True)
                self._after_call_quietly()
                for job in batch:
                    job.error = job.error or exc
                _on_their_loops(batch, _resolve_all)

    def _after_call_quietly(self) -> None:
        try:
            self._after_call()
        except Exception:
            log.warning("closing the writer's connection failed", exc_info=True)

    def _call(self, call: _Call) -> None:
        if not call.future.set_running_or_notify_cancel():
            return
        try:
            result = call.fn(*call.args, **call.kwargs)
        except BaseException as exc:
            call.future.set_exception(exc)
        else:
            call.future.set_result(result)

    def _commit(self, jobs: list[Job]) -> None:
        if tracing.enabled:
            from django.db import connections

            with tracing.batch_span(jobs, database=connections["default"].vendor) as span:
                self._commit_run(jobs)
                tracing.batch_failed(span, [job.error for job in jobs if job.error is not None
                                            and not isinstance(job.error, TeamError)])
        else:
            self._commit_run(jobs)
        self._finish(jobs)

    def _commit_run(self, jobs: list[Job]) -> None:
        self.batches += 1
        self.jobs += len(jobs)
        started = time.perf_counter()
        try:
            self._batch_run(jobs)
        except Exception as exc:
            self._after_call()  # a broken connection is closed; the next attempt opens a fresh one
            if outage.unavailable(exc) == "database":
                outage.database.suspect()  # the other threads' connections may be broken too
                self._unavailable(jobs)
            else:
                # One job broke the transaction: run each alone, so only it fails.
                log.warning("a batch of %d failed; committing its jobs one by one", len(jobs), exc_info=True)
                self._one_by_one(jobs)
        else:
            outage.database.ok()
            if self._observe is not None:
                self._observe(len(jobs), time.perf_counter() - started)

    def _batch_run(self, jobs: list[Job]) -> None:
        from django.utils import timezone

        batch = Batch(timezone.now())
        with self._transaction(batch):
            ordered = sorted(jobs, key=_lock_order)
            if self._pipeline is not None:
                ordered = self._pipeline(ordered, batch)
            for job in ordered:
                self._execute(job, batch)
            self._flush(batch)

    def _unavailable(self, jobs: list[Job]) -> None:
        """The database was out of reach, or the connection broke (it restarted): the
        whole batch once more, on a fresh connection. Failing again, every job fails
        with that error (a 503 to its caller), counted, not logged one by one:
        running them one by one would only wait for the same refusal again."""
        try:
            self._batch_run(jobs)
        except Exception as exc:
            self._after_call()
            if outage.unavailable(exc) != "database":
                log.warning("a batch of %d failed; committing its jobs one by one", len(jobs), exc_info=True)
                self._one_by_one(jobs)
                return
            outage.database.failed("committing", exc)
            for job in jobs:
                job.error = exc
        else:
            outage.database.ok()

    def _one_by_one(self, jobs: list[Job]) -> None:
        from django.utils import timezone

        for job in jobs:
            job.error = None
            try:
                batch = Batch(timezone.now())
                with self._transaction(batch):
                    self._execute(job, batch)
                    self._flush(batch)
            except Exception as exc:
                log.warning("a %s failed", type(job).__name__, exc_info=True)
                job.error = exc
            finally:
                self._after_call()

    def _finish(self, jobs: list[Job]) -> None:
        for job in jobs:
            if job.error is None:
                job.committed()
        _on_their_loops(jobs, _finish_all)

    @staticmethod
    def _execute(job: Job, batch: Batch) -> None:
        job.error = None
        try:
            job.execute(batch)
        except TeamError as exc:  # a refusal writes nothing before it raises
            job.error = exc


def _lock_order(job: Job) -> tuple:
    return job.lock_order


def _on_their_loops(jobs: list[Job], fn: Callable[[list[Job]], None]) -> None:
    """From the writer thread: ``fn`` of the jobs of each event loop, on that loop, in order."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in jobs:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, mine in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits for these answers
            loop.call_soon_threadsafe(fn, mine)


def _finish_all(jobs: list[Job]) -> None:
    for job in jobs:
        if job.error is None:
            try:
                job.finish()
            except Exception:  # pushes are doorbells; recovery repeats a lost one
                log.warning("finishing a %s failed", type(job).__name__, exc_info=True)
        job._resolve()


def _resolve_all(jobs: list[Job]) -> None:
    for job in jobs:
        job._resolve()
