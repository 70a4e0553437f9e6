import asyncio

import pytest
import pytest_asyncio


@pytest.fixture(autouse=True)
def _steerboard_timings(settings):
    # Tests drive recovery explicitly; no background sweeper races them.
    settings.STEERBOARD = {**settings.STEERBOARD, "SWEEP_INTERVAL": 0, "WAIT_RECHECK_INTERVAL": 5.0}


class WaitReads:
    """Counts wait_agent's reads of what it compares with (mailbox.selectors.wait_snapshot)
    and lets a test wait for them instead of sleeping."""

    def __init__(self, loop):
        self.loop = loop
        self.count = 0  # reads returned, counted on the database thread as each one returns
        self.changed = asyncio.Event()

    def read(self) -> None:
        self.count += 1
        self.loop.call_soon_threadsafe(self.changed.set)

    async def reached(self, count: int = 1, timeout: float = 10.0) -> None:
        """Until ``count`` reads have returned. A wait past its first read is comparing, and
        anything that changes from then on wakes it (its listener reads again once subscribed)."""
        async with asyncio.timeout(timeout):
            while self.count < count:
                self.changed.clear()
                await self.changed.wait()


@pytest_asyncio.fixture
async def wait_reads(monkeypatch):
    from mailbox import selectors

    reads = WaitReads(asyncio.get_running_loop())
    real = selectors.wait_snapshot

    def counted(member):
        try:
            return real(member)
        finally:
            reads.read()

    monkeypatch.setattr(selectors, "wait_snapshot", counted)
    return reads
