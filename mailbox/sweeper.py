"""The periodic recovery sweeper.

Each server process runs one in the background, started by the first websocket
or tool call it serves (daphne has no startup hook). Several processes may
sweep at once: admission claims targets with SKIP LOCKED, so no two admit the
same target together. ``manage.py sweep --loop`` runs the same pass on its own.
"""
import asyncio
import logging

from channels.db import database_sync_to_async
from django.conf import settings

from mailbox.delivery import recovery_sweep

log = logging.getLogger(__name__)
_task: asyncio.Task | None = None


async def _run(interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await database_sync_to_async(recovery_sweep)()
        except Exception:
            log.warning("recovery sweep failed; trying again next interval", exc_info=True)


def ensure_started() -> None:
    global _task
    interval = settings.STEERBOARD["SWEEP_INTERVAL"]
    if interval <= 0 or (_task is not None and not _task.done()):
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    _task = loop.create_task(_run(interval))
