"""The periodic recovery sweeper and the process heartbeat.

Each server process runs one sweeper in the background, started by the edge
(mailbox/transports/edge.py) for the first request or websocket it lets through, health
probes aside (daphne has no startup hook); the same task
beats the process's heartbeat (mailbox/members/presence.py), also when the sweep
itself is left to ``manage.py sweep``, holds the process's presence rows
against its open websockets (``recovery.presence_reconcile``), and keeps the
process's long-lived objects out of the garbage collector's full walks
(``heap_settle``). Several processes may sweep at
once: admission claims targets with SKIP LOCKED, so no two admit the same
target together, and reaping a dead process's presence is idempotent.
``manage.py sweep --loop`` runs the same pass on its own.
"""
import asyncio
import contextvars
import gc
import logging

from django.conf import settings
from django.db import connections

from mailbox.plumbing import db
from mailbox.plumbing.db import to_db_thread
from mailbox.members import presence
from mailbox.plumbing import outage
from mailbox.operations.recovery import presence_reconcile, recovery_pass

log = logging.getLogger(__name__)
CHECKPOINT_INTERVAL = 1.0
# While the database is out of reach the heartbeat tries this often, so its return is
# noticed (and the recovery pass runs) within a fraction of a second.
OUTAGE_BEAT_INTERVAL = 0.25
# This process's presence rows are held against its open websockets this often, besides
# after every detach that failed and whenever the database comes back.
RECONCILE_INTERVAL = 60.0
# The objects that lived through this interval are frozen (heap_settle).
HEAP_SETTLE_INTERVAL = 10.0
_task: asyncio.Task | None = None
_wake: asyncio.Event | None = None
_reconcile: asyncio.Event | None = None


async def _beat_loop(interval: float) -> None:
    while True:
        try:
            await to_db_thread(presence.process_beat, lane="heartbeat")()
        except Exception as exc:
            if outage.noted(exc, "the heartbeat") is None:
                log.warning("heartbeat failed; trying again next interval", exc_info=True)
        else:
            outage.database.ok()  # a return wakes the sweep (_database_back)
        await asyncio.sleep(interval if outage.database.up else min(interval, OUTAGE_BEAT_INTERVAL))


async def _checkpoint_loop(interval: float) -> None:
    """SQLite: move the WAL into the database file on the heartbeat's thread and
    connection, so the writer's commits do not (a checkpoint writes and syncs the
    database file: milliseconds that a send or an entry would otherwise wait)."""
    while True:
        await asyncio.sleep(interval)
        try:
            await to_db_thread(db.wal_checkpoint, lane="heartbeat")()
        except Exception as exc:
            if outage.noted(exc, "a WAL checkpoint") is None:
                log.warning("WAL checkpoint failed; trying again next interval", exc_info=True)


async def _set_or_after(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set, or ``seconds`` have passed. Not ``asyncio.wait_for``: on
    Python 3.11 it swallows a cancel that comes as the event is set (the database came
    back as the process stopped), and the loop then never ends."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass


async def _pass_loop(woken: asyncio.Event, interval: float, work, what: str, *, until_it_lands: bool = False) -> None:
    """``work`` on a database thread every ``interval``, or at once when ``woken`` is set (the
    database came back, or a detach failed); a failure other than an outage is logged. With
    ``until_it_lands`` a failed pass is tried again within a fraction of a second, not next interval."""
    while True:
        await _set_or_after(woken, interval)
        woken.clear()
        try:
            await to_db_thread(work)()
        except Exception as exc:
            if outage.noted(exc, what) is None:
                log.warning("%s failed; trying again %s", what, "soon" if until_it_lands else "next interval", exc_info=True)
            if until_it_lands:
                await asyncio.sleep(OUTAGE_BEAT_INTERVAL)
                woken.set()


# Objects frozen after the last full pass, and since it (counted as they are frozen:
# gc.get_freeze_count() walks every frozen object, 20-45 ms with 2 000 idle sessions).
_heap_baseline = 0
_heap_frozen = 0


def heap_settle() -> bool:
    """Collect the objects not frozen yet, then freeze what survived (``gc.freeze``: left out
    of every later collection). Answers whether this was a full pass.

    Python's full collections (generation 2) walk every object the process holds, with every
    thread stopped: one daphne process with 2 000 idle agent websockets holds ~750 000, a
    quarter to half a second of this machine's CPU each time, so the more idle sessions, the
    longer each pause a send waits behind (docs/performance.md, "Idle sessions"). Settled, the
    walks cover only what the last interval added. A cycle that becomes garbage among frozen
    objects (a closed websocket's) waits for the full pass (unfreeze, collect, freeze), run
    once as many objects were frozen since the last one as it left: a full walk is paid for
    by as many new objects, and the garbage it finds is at most the live heap again."""
    global _heap_baseline, _heap_frozen
    gc.collect()
    survivors = len(gc.get_objects())  # the objects not frozen: what this interval added
    full = bool(_heap_baseline) and _heap_frozen + survivors > 2 * _heap_baseline
    if full:
        gc.unfreeze()
        gc.collect()
        survivors, _heap_frozen = len(gc.get_objects()), 0
    gc.freeze()
    _heap_frozen += survivors
    if full or not _heap_baseline:
        _heap_baseline = max(1, _heap_frozen)
    return full


async def _heap_loop(interval: float) -> None:
    """heap_settle on the event loop every ``interval``: a collection stops every thread anyway."""
    while True:
        await asyncio.sleep(interval)
        heap_settle()


def _set_soon(event: asyncio.Event | None) -> None:
    """Set one of the sweeper's events from any thread."""
    task = _task
    if task is None or task.done() or event is None:
        return
    try:
        task.get_loop().call_soon_threadsafe(event.set)
    except RuntimeError:  # that loop has closed
        pass


def _database_back() -> None:
    """From whichever thread saw the database work again: wake the sweep now, and
    end what sockets that closed meanwhile could not."""
    _set_soon(_wake)
    _set_soon(_reconcile)


def reconcile_soon() -> None:
    """A websocket's detach failed: end its presence as soon as the database takes it."""
    _set_soon(_reconcile)


outage.database.on_back(_database_back)


async def _run(sweep_interval: float, beat_interval: float) -> None:
    """Beat every ``beat_interval``; sweep every ``sweep_interval`` (0: never, an
    external ``manage.py sweep --loop`` does it). Two loops, not one: a sweep
    that takes long under load (it queues with the requests for the database
    threads) must not delay the beat, or the other processes take this one for
    dead."""
    loops = [
        _beat_loop(beat_interval),
        # recovery.presence_reconcile: this process's presence rows held against its open websockets.
        _pass_loop(_reconcile, RECONCILE_INTERVAL, presence_reconcile, "reconciling presence", until_it_lands=True),
        _heap_loop(HEAP_SETTLE_INTERVAL),
    ]
    if connections["default"].vendor == "sqlite":
        loops.append(_checkpoint_loop(CHECKPOINT_INTERVAL))
    if sweep_interval > 0:
        loops.append(_pass_loop(_wake, sweep_interval, recovery_pass, "the recovery sweep"))
    await asyncio.gather(*loops)


def ensure_started() -> None:
    global _task, _wake, _reconcile
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if _task is not None and not _task.done() and _task.get_loop() is loop:
        return
    sweep_interval = settings.STEERBOARD["SWEEP_INTERVAL"]
    beat_interval = settings.STEERBOARD["HEARTBEAT_INTERVAL"]
    if sweep_interval <= 0 and beat_interval <= 0:
        return
    # A context of its own: started from inside a request, it must not inherit
    # (and outlive) that request's context.
    _wake, _reconcile = asyncio.Event(), asyncio.Event()
    _task = loop.create_task(
        _run(sweep_interval, beat_interval if beat_interval > 0 else sweep_interval), context=contextvars.Context()
    )
