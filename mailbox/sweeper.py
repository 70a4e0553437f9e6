"""The periodic recovery sweeper and the process heartbeat.

Each server process runs one sweeper in the background, started by the first
websocket or tool call it serves (daphne has no startup hook); the same task
beats the process's heartbeat (mailbox/presence.py), also when the sweep
itself is left to ``manage.py sweep``. Several processes may sweep at
once: admission claims targets with SKIP LOCKED, so no two admit the same
target together, and reaping a dead process's presence is idempotent.
``manage.py sweep --loop`` runs the same pass on its own.
"""
import asyncio
import logging

from django.conf import settings

from mailbox import idempotency, presence
from mailbox.db import database_sync_to_async
from mailbox.delivery import recovery_sweep

log = logging.getLogger(__name__)
_task: asyncio.Task | None = None


def recovery_pass() -> dict:
    """One pass: reap what dead processes left behind, then the delivery sweep."""
    idempotency.prune_due()  # expired idempotency keys: at the first pass, then hourly
    reaped = presence.presence_reap()
    return {**recovery_sweep(), **reaped}


async def _run(sweep_interval: float, beat_interval: float) -> None:
    """Beat every ``beat_interval``; sweep every ``sweep_interval`` (0: never, an
    external ``manage.py sweep --loop`` does it)."""
    loop = asyncio.get_running_loop()
    next_beat = next_sweep = loop.time()
    while True:
        now = loop.time()
        if now >= next_beat:
            next_beat = now + beat_interval
            try:
                await database_sync_to_async(presence.process_beat, lane="heartbeat")()
            except Exception:
                log.warning("heartbeat failed; trying again next interval", exc_info=True)
        if sweep_interval > 0 and now >= next_sweep + sweep_interval:
            next_sweep = now
            try:
                await database_sync_to_async(recovery_pass)()
            except Exception:
                log.warning("recovery sweep failed; trying again next interval", exc_info=True)
        wake = next_beat if sweep_interval <= 0 else min(next_beat, next_sweep + sweep_interval)
        await asyncio.sleep(max(0.01, wake - loop.time()))


def ensure_started() -> None:
    global _task
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
    _task = loop.create_task(_run(sweep_interval, beat_interval if beat_interval > 0 else sweep_interval))
