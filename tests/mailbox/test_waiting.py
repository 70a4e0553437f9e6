"""mailbox/members/waiting.py: the team's doorbells for wait_agent and A2A streams."""
import asyncio
import itertools

from mailbox.members import waiting


def _listeners() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "_TeamWatch._listen"]


async def _wait_closed_after(delay: float) -> list[asyncio.Task]:
    """Open the team's doorbells, leave after ``delay``; the listeners still running 2 s later."""
    async with waiting.team_rings(team_id=1):
        await asyncio.sleep(delay)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2
    while _listeners() and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return _listeners()


def test_a_wait_that_ends_while_its_listener_subscribes_leaves_no_listener():
    """A wait that returns at once (no active peer) closes its listener while it is
    still subscribing. On Redis a cancel that lands there could be lost, and the
    listener then waited on its channel for good: its event loop never closed (a
    test's teardown hung for 300 s). Each round is a fresh loop, so the listener
    connects and subscribes afresh, and the delays land it in every phase."""
    delays = itertools.cycle([0, 0.0005, 0.001, 0.002, 0.003, 0.005])
    left_running = 0
    for _ in range(60):
        with asyncio.Runner() as runner:
            left = runner.run(_wait_closed_after(next(delays)))
            left_running += len(left)
            for task in left:  # so the runner can close and the next round runs
                task.cancel()
    assert left_running == 0
