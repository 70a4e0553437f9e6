"""Channel-layer group names and publishing.

Every publish is a doorbell: at most once, possibly lost, always recoverable
from the database. Publishes that describe a write go out after its commit.
What is for an agent session (steer, prompt, interrupt) goes to the one
channel that speaks for the member now, ``Member.session_channel``, not to a
group: an older websocket of the member, or one on a process taken for dead
that Redis pub/sub keeps subscribed, hears nothing and catches up in the
replay of its next hello.

A session whose websocket this process holds is pushed to directly
(``session_register``), not through the channel layer: a frame costs a call,
not a layer round trip. The layer stays the way to reach other processes.

Dashboard doorbells are coalesced per team: the first ring of a quiet team
goes out at once, and the rings after it within ``DASHBOARD_RING_INTERVAL``
go out as one (the page re-reads everything on any ring, so what a ring says
is only a hint). A burst of deliveries then costs a team's dashboards a few
rings a second, not three per message.
"""
import asyncio
import logging
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from mailbox import db

log = logging.getLogger(__name__)
_in_flight: set[asyncio.Task] = set()
# Channel name -> the push function of a session websocket held by this process,
# and a function that says whether that session holds steers it has not yet
# reported entries for.
_local_sessions: dict[str, Callable[[dict], None]] = {}
_local_awaiting: dict[str, Callable[[], bool]] = {}
_local_loops: dict[str, asyncio.AbstractEventLoop] = {}
DASHBOARD_RING_INTERVAL = 0.1


def host_group(team_id: int) -> str:
    return f"host.{team_id}"


def dashboard_group(team_id: int) -> str:
    return f"dashboard.{team_id}"


# --- sessions held by this process ---------------------------------------------------------
def session_register(channel: str, push: Callable[[dict], None], awaiting: Callable[[], bool]) -> None:
    """From the event loop: events for ``channel`` are handed to ``push`` (on that loop)."""
    _local_loops[channel] = asyncio.get_running_loop()
    _local_sessions[channel] = push
    _local_awaiting[channel] = awaiting


def session_unregister(channel: str) -> None:
    _local_sessions.pop(channel, None)
    _local_awaiting.pop(channel, None)
    _local_loops.pop(channel, None)


def session_awaits_entries(channel: str) -> bool:
    """Whether ``channel`` is a live session of this process that still holds steers
    it has not reported: a push on its websocket is not lost, so pushing again
    only adds work (recovery skips it; a reconnect's hello replays everything)."""
    awaiting = _local_awaiting.get(channel)
    return awaiting is not None and awaiting()


def _push_local(channel: str, event: dict) -> bool:
    """Hand an event to a session of this process; False when it is not one of ours.
    From another thread (a database thread) it goes through the session's loop."""
    push, loop = _local_sessions.get(channel), _local_loops.get(channel)
    if push is None or loop is None:
        return False
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        push(event)
        return True
    try:
        loop.call_soon_threadsafe(push, event)
    except RuntimeError:  # that loop has closed: the session is gone with it
        pass
    return True


def session_push(channel: str, event: dict) -> None:
    """From the event loop, after a commit: to a session of this process directly,
    else through the channel layer (a doorbell; recovery repeats a lost one)."""
    if channel and not _push_local(channel, event):
        _publish_on_loop(channel, event, True)


def send_now(name: str, event: dict, *, to_channel: bool = False) -> None:
    """Publish at once to the group ``name`` (or the one channel ``name``); raises
    when the channel layer is down (admission uses that)."""
    if to_channel and _push_local(name, event):
        return
    layer = get_channel_layer()
    async_to_sync(layer.send if to_channel else layer.group_send)(name, event)


async def _publish(name: str, event: dict, to_channel: bool = False) -> None:
    """To the group ``name``, or to the one channel ``name``."""
    if to_channel and _push_local(name, event):
        return
    layer = get_channel_layer()
    try:
        await (layer.send(name, event) if to_channel else layer.group_send(name, event))
    except Exception:  # a lost doorbell is recovered from the database
        log.warning("publish to %s failed", name, exc_info=True)


def _publish_on_loop(name: str, event: dict, to_channel: bool) -> None:
    task = asyncio.ensure_future(_publish(name, event, to_channel))
    _in_flight.add(task)
    task.add_done_callback(_in_flight.discard)


def _send_quietly(name: str, event: dict, to_channel: bool = False) -> None:
    """Publish without waiting for it: on a database thread the publish is handed
    to the event loop that called it, so the thread (and, on SQLite, the write
    lock it may hold next) does not wait for a round trip nobody needs."""
    loop = db.calling_loop()
    if loop is not None:
        try:
            loop.call_soon_threadsafe(_publish_on_loop, name, event, to_channel)
            return
        except RuntimeError:  # the loop has closed: publish the slow way
            pass
    async_to_sync(_publish)(name, event, to_channel)


def channel_send_quietly(channel: str, event: dict) -> None:
    """Send to one consumer's channel (not a group), without waiting for it."""
    _send_quietly(channel, event, to_channel=True)


def send_after_commit(name: str, event: dict, *, to_channel: bool = False) -> None:
    transaction.on_commit(lambda: _send_quietly(name, event, to_channel))


def dashboard_notify(team_id: int, kind: str, **data) -> None:
    """Tell the team's dashboards something changed; they re-read what they show."""
    event = {"type": "team.changed", "kind": kind, **data}
    transaction.on_commit(lambda: _ring_from_anywhere(team_id, event))


def _ring_from_anywhere(team_id: int, event: dict) -> None:
    loop = db.calling_loop()
    if loop is not None:
        try:
            loop.call_soon_threadsafe(dashboard_ring, team_id, event)
            return
        except RuntimeError:
            pass
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here (a management command, a sync test): publish the slow way
        async_to_sync(_publish)(dashboard_group(team_id), event)
        return
    dashboard_ring(team_id, event)


class _Rings:
    """A team's doorbells while its interval runs: the latest event, and how many were folded into it."""

    def __init__(self):
        self.pending: dict | None = None
        self.kinds: set[str] = set()


_rings: dict[tuple[asyncio.AbstractEventLoop, int], _Rings] = {}


def dashboard_ring(team_id: int, event: dict) -> None:
    """On the event loop: ring the team's dashboards now, or once at the end of
    the running interval with whatever rang during it."""
    loop = asyncio.get_running_loop()
    key = (loop, team_id)
    rings = _rings.get(key)
    if rings is not None:  # an interval runs: fold this ring into its closing one
        rings.pending = event
        rings.kinds.add(event.get("kind", ""))
        return
    _rings[key] = _Rings()
    _publish_on_loop(dashboard_group(team_id), event, False)
    loop.call_later(DASHBOARD_RING_INTERVAL, _interval_over, key)


def _interval_over(key) -> None:
    rings = _rings.pop(key, None)
    if rings is None or rings.pending is None:
        return
    event = dict(rings.pending)
    if len(rings.kinds) > 1:
        event["kinds"] = sorted(rings.kinds)
    # The closing ring starts an interval of its own: a steady stream stays one ring per interval.
    dashboard_ring(key[1], event)
