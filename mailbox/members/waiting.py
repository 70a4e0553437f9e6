"""wait_agent's wake-ups: the team's doorbells, heard once per process.

A waiting call holds no thread and does not poll. Every change wait_agent
wakes on (a member's status, a message to the caller, a task) already rings
the team's dashboard group (mailbox/plumbing/events.py). The first waiter of a team in
this process subscribes one channel to that group; every ring wakes the
team's waiters, and each reads the database once to see whether what it waits
for changed. A lost ring (the channel layer was away) is caught by a recheck
every ``WAIT_RECHECK_INTERVAL`` seconds.

Waits are capped per member and process (``MAX_WAITS_PER_MEMBER``): a Lead
that opens more gets ``TOO_MANY_WAITS`` (429) instead of holding the server.
"""
import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

from channels.layers import get_channel_layer
from django.conf import settings

from mailbox.plumbing import events
from teams.errors import ErrorCode, TeamError

log = logging.getLogger(__name__)


class _TeamWatch:
    """One channel in the team's dashboard group; rings set every waiter's event."""

    def __init__(self, team_id: int):
        self.team_id = team_id
        self.waiters: set[asyncio.Event] = set()
        self.closing = False
        self.receiving = False
        self.task = asyncio.ensure_future(self._listen())

    def close(self) -> None:
        """Stop listening. Only a listener that is receiving is cancelled: a cancel that
        lands while it subscribes can be lost inside the Redis client, and the listener
        then waits on its channel for good (and its event loop cannot close). One that
        is still subscribing sees ``closing`` when it gets there and stops itself."""
        self.closing = True
        if self.receiving:
            self.task.cancel()

    def wake_all(self) -> None:
        for waiter in self.waiters:
            waiter.set()

    async def _listen(self) -> None:
        layer = get_channel_layer()
        group = events.dashboard_group(self.team_id)
        while not self.closing:
            channel = None
            try:
                channel = await layer.new_channel("wait.")
                await layer.group_add(group, channel)
                self.receiving = True
                if self.closing:  # closed while subscribing: leave as a cancelled receive leaves
                    self.task.cancel()
                # Subscribed: anything that happened before is caught by the waiters' own reads.
                self.wake_all()
                while True:
                    await layer.receive(channel)  # a cancel here unsubscribes the channel
                    self.wake_all()
            except asyncio.CancelledError:
                if channel is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(layer.group_discard(group, channel))
                raise
            except Exception:
                # The layer went away: the waiters look at the database, and this subscribes again.
                self.receiving = False
                log.warning("wait_agent lost the doorbells of team %s; subscribing again", self.team_id)
                self.wake_all()
                await asyncio.sleep(1.0)


_watches: dict[tuple[asyncio.AbstractEventLoop, int], _TeamWatch] = {}
_waiting: Counter[int] = Counter()  # member id -> waits open in this process


@contextlib.asynccontextmanager
async def doorbells(*, team_id: int, member_id: int) -> AsyncIterator[asyncio.Event]:
    """While open: an event set on every ring of the team (clear it, then read, then wait)."""
    if _waiting[member_id] >= settings.STEERBOARD["MAX_WAITS_PER_MEMBER"]:
        cap = settings.STEERBOARD["MAX_WAITS_PER_MEMBER"]
        raise TeamError(
            ErrorCode.TOO_MANY_WAITS,
            f"You already have {cap} wait_agent calls waiting, the most one member may have; "
            "let one return before waiting again.",
            limit=cap,
        )
    _waiting[member_id] += 1
    try:
        async with team_rings(team_id=team_id) as event:
            yield event
    finally:
        _waiting[member_id] -= 1
        if _waiting[member_id] <= 0:
            del _waiting[member_id]


@contextlib.asynccontextmanager
async def team_rings(*, team_id: int) -> AsyncIterator[asyncio.Event]:
    """``doorbells`` without the per-member cap, for a watcher that is no member
    (an A2A task's stream, delegation/streams.py)."""
    key = (asyncio.get_running_loop(), team_id)
    watch = _watches.get(key)
    if watch is None:
        watch = _watches[key] = _TeamWatch(team_id)
    event = asyncio.Event()
    watch.waiters.add(event)
    try:
        yield event
    finally:
        watch.waiters.discard(event)
        if not watch.waiters and _watches.get(key) is watch:
            del _watches[key]
            watch.close()
