"""Following A2A tasks: one reader per team and process, which pushes each stream its
task's changes.

A stream (``SendStreamingMessage``, ``SubscribeToTask``, and the waits of a blocking
``SendMessage`` and of ``CancelTask``: delegation/tasks.py's ``task_follow``) registers
the task it follows with its team's watch in this process. The watch hears the team's
doorbells (mailbox/members/waiting.py's ``team_rings``, the dashboard group on the channel
layer) and, on a ring and every ``RECHECK_SECONDS`` without one (a lost doorbell),
reads every task its streams follow at once (with the ``read`` its first stream
brought: ``tasks.tasks_by_id``, a few indexed queries, however many streams and
however long the histories; at most one read per ``READ_INTERVAL``), then wakes
only the streams whose task's state changed. A hundred streams on a team cost the database what one does; a stream
whose task did not change is not woken at all.

A read that fails (the database is away) is counted (mailbox/plumbing/outage.py) and tried
again at the next ring or recheck; the streams stay open meanwhile.
"""
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from mailbox.members import waiting
from mailbox.plumbing import outage
from typing import Protocol

from delegation import db as a2a_db

log = logging.getLogger(__name__)

# The watch reads its tasks again this often even without a ring (a lost doorbell).
RECHECK_SECONDS = 2.0
# And at most this often: rings (and streams that start) meanwhile are one read
# (the dashboards' doorbells are folded the same way, mailbox/plumbing/events.py).
READ_INTERVAL = 0.1


class TaskView(Protocol):
    """What a stream follows of a task (delegation/tasks.TaskView): this module reads tasks
    only through the ``read`` it is handed, so it imports nothing of delegation/tasks.py."""

    id: str
    state: str


# How a watch reads its tasks: ``read(task_ids=[...])`` -> the views of those that exist.
TasksRead = Callable[..., list]


class Gone(Exception):
    """The followed task is no longer there (its team or member was deleted)."""


class Follower:
    """One stream's view of its task: woken when the task's state changes."""

    def __init__(self, view: TaskView):
        self._latest = view
        self._gone = False
        self._changed = asyncio.Event()

    def offer(self, view: TaskView) -> None:
        if view.state != self._latest.state:
            self._latest = view
            self._changed.set()

    def gone(self) -> None:
        self._gone = True
        self._changed.set()

    async def changed(self) -> TaskView:
        """The task once its state differs from what this stream was last given."""
        await self._changed.wait()
        self._changed.clear()
        if self._gone:
            raise Gone(self._latest.id)
        return self._latest


class _TeamWatch:
    def __init__(self, team_id: int, read: TasksRead):
        self.team_id = team_id
        self.read = read
        self.followers: dict[str, set[Follower]] = {}
        self.ring: asyncio.Event | None = None
        self.reads = 0  # for the tests: how many times the watch read its tasks
        self.task = asyncio.ensure_future(self._run())

    def add(self, task_id: str, follower: Follower) -> None:
        self.followers.setdefault(task_id, set()).add(follower)
        if self.ring is not None:  # read soon: the stream's view may be older than the last read
            self.ring.set()

    def discard(self, task_id: str, follower: Follower) -> None:
        found = self.followers.get(task_id)
        if found is not None:
            found.discard(follower)
            if not found:
                del self.followers[task_id]

    async def _run(self) -> None:
        async with waiting.team_rings(team_id=self.team_id) as ring:
            self.ring = ring
            while True:
                ring.clear()
                await self._read()
                await asyncio.sleep(READ_INTERVAL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ring.wait(), RECHECK_SECONDS - READ_INTERVAL)

    async def _read(self) -> None:
        wanted = list(self.followers)
        if not wanted:
            return
        self.reads += 1
        try:
            views = await a2a_db.run(self.read, task_ids=wanted)
        except Exception as exc:
            if outage.noted(exc, "following A2A tasks") is None:
                log.exception("reading the followed A2A tasks of team %s failed", self.team_id)
            return
        found = {view.id: view for view in views}
        for task_id in wanted:
            view = found.get(task_id)
            for follower in list(self.followers.get(task_id, ())):
                if view is None:
                    follower.gone()
                else:
                    follower.offer(view)


_watches: dict[tuple[asyncio.AbstractEventLoop, int], _TeamWatch] = {}


@contextlib.asynccontextmanager
async def following(view: TaskView, *, team_id: int, read: TasksRead) -> AsyncIterator[Follower]:
    """While open: a ``Follower`` of the task ``view`` shows, woken by the team's watch (which
    reads with ``read``, when this stream starts it)."""
    key = (asyncio.get_running_loop(), team_id)
    watch = _watches.get(key)
    if watch is None:
        watch = _watches[key] = _TeamWatch(team_id, read)
    follower = Follower(view)
    watch.add(view.id, follower)
    try:
        yield follower
    finally:
        watch.discard(view.id, follower)
        if not watch.followers and _watches.get(key) is watch:
            del _watches[key]
            watch.task.cancel()


def watch_of(team_id: int) -> _TeamWatch | None:
    """This loop's watch of the team, while any stream follows one of its tasks (for tests)."""
    return _watches.get((asyncio.get_running_loop(), team_id))
