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
from typing import Protocol

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from mailbox.plumbing import db
from mailbox.plumbing import outage

log = logging.getLogger(__name__)
_in_flight: set[asyncio.Task] = set()
# Session channels whose push failed because Redis was away: rung again from the database once it is back.
_unrung: set[str] = set()
DASHBOARD_RING_INTERVAL = 0.1


class LocalSession(Protocol):
    """A session this process holds (mailbox/members/sessions.ConnectedSession, fed by its websocket)."""

    def push(self, event: dict) -> None:
        """On its event loop: send the event's frame, after those pushed before it."""

    def awaits_entries(self) -> bool:
        """Whether it holds steers it has not reported entries for."""


# Channel name -> (the loop it runs on, the session).
_local: dict[str, tuple[asyncio.AbstractEventLoop, LocalSession]] = {}


def host_group(team_id: int) -> str:
    return f"host.{team_id}"


def dashboard_group(team_id: int) -> str:
    return f"dashboard.{team_id}"


# --- sessions held by this process ---------------------------------------------------------
def session_register(channel: str, session: LocalSession) -> None:
    """From the session's event loop: events for ``channel`` are handed to it directly."""
    _local[channel] = (asyncio.get_running_loop(), session)


def session_unregister(channel: str) -> None:
    _local.pop(channel, None)


def session_awaits_entries(channel: str) -> bool:
    """Whether ``channel`` is a live session of this process that still holds steers
    it has not reported: a push on its websocket is not lost, so pushing again
    only adds work (recovery skips it; a reconnect's hello replays everything)."""
    found = _local.get(channel)
    return found is not None and found[1].awaits_entries()


def _push_local(channel: str, event: dict) -> bool:
    """Hand an event to a session of this process; False when it is not one of ours.
    From another thread (a database thread) it goes through the session's loop."""
    found = _local.get(channel)
    if found is None:
        return False
    loop, session = found
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        session.push(event)
        return True
    try:
        loop.call_soon_threadsafe(session.push, event)
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
    try:
        async_to_sync(layer.send if to_channel else layer.group_send)(name, event)
    except Exception as exc:
        if not _layer_down(exc):
            raise
        # Counted, not logged one by one; admission keeps the messages queued (no traceback either).
        outage.redis.failed("publishing", exc)
        raise outage.LayerUnavailable(f"the channel layer is unreachable ({type(exc).__name__})") from exc
    outage.redis.ok()


async def _publish(name: str, event: dict, to_channel: bool = False) -> None:
    """To the group ``name``, or to the one channel ``name``."""
    if to_channel and _push_local(name, event):
        return
    layer = get_channel_layer()
    try:
        await (layer.send(name, event) if to_channel else layer.group_send(name, event))
    except Exception as exc:  # a lost doorbell is recovered from the database
        if not _layer_down(exc):
            log.warning("publish to %s failed", name, exc_info=True)
            return
        outage.redis.failed("publishing", exc)
        if to_channel and len(_unrung) < 10_000:
            _unrung.add(name)
        return
    outage.redis.ok()


def _layer_down(exc: BaseException) -> bool:
    """Whether a publish failed because Redis could not be reached (not a bad event)."""
    if isinstance(exc, OSError | asyncio.TimeoutError):
        return True
    try:
        from redis.exceptions import ConnectionError, TimeoutError
    except ImportError:  # the in-memory layer only
        return False
    return isinstance(exc, ConnectionError | TimeoutError)


# --- after Redis comes back ------------------------------------------------------------------
_recovery: asyncio.Task | None = None
_recovery_again = False
# What rings the sessions' doorbells again from the database: ``ring(channels=[...])`` admits
# again the undelivered messages of the members those channels speak for and answers how many
# members. Recovery's (mailbox/operations/recovery.py), registered by mailbox/apps.py: delivery and
# recovery publish through this module, so it is handed the function, it does not import them.
_ring_again: Callable[..., int] | None = None


def ring_again_with(ring: Callable[..., int]) -> None:
    """Register what ``redis_recovered`` runs on a database thread (see ``_ring_again``)."""
    global _ring_again
    _ring_again = ring


def redis_recovered() -> None:
    """Redis is back (this process receives again, or a publish went out again): ring
    again, from the database, every doorbell a session of this process may have
    missed, and those this process failed to publish. At once, not at the sweeper's
    next redelivery: a session that missed one steer holds every later one back."""
    _on_the_loop(_recovery_start)


def _recovery_start() -> None:
    global _recovery, _recovery_again
    if _recovery is not None and not _recovery.done():
        _recovery_again = True  # once more when the running pass ends: it may have read too early
        return
    _recovery = asyncio.ensure_future(_recovery_run())


async def _recovery_run() -> None:
    global _recovery_again
    while True:
        _recovery_again = False
        channels = set(_local) | _unrung
        _unrung.difference_update(channels)
        try:
            if _ring_again is None:
                raise RuntimeError("nothing registered to ring sessions again (events.ring_again_with)")
            count = await db.to_db_thread(_ring_again)(channels=sorted(channels))
            log.info("after Redis came back: rang again %d sessions' undelivered messages", count)
        except Exception as exc:
            if outage.unavailable(exc) is None:
                log.warning("ringing sessions again after Redis came back failed", exc_info=True)
            _unrung.update(channels)
        if not _recovery_again:
            return


outage.redis.on_back(redis_recovered)


def _publish_on_loop(name: str, event: dict, to_channel: bool) -> None:
    task = asyncio.ensure_future(_publish(name, event, to_channel))
    _in_flight.add(task)
    task.add_done_callback(_in_flight.discard)


def _on_the_loop(fn, *args) -> bool:
    """Run ``fn(*args)`` on the event loop: at once when called on it, handed over
    when called on the database thread working for it. False when there is no
    loop to run it on (a management command, a request thread, a closed loop)."""
    loop = db.calling_loop()
    if loop is not None:
        try:
            loop.call_soon_threadsafe(fn, *args)
            return True
        except RuntimeError:  # the loop has closed
            return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    fn(*args)
    return True


def _send_quietly(name: str, event: dict, to_channel: bool = False) -> None:
    """Publish without waiting for it: on a database thread the publish is handed
    to the event loop that called it, so the thread (and, on SQLite, the write
    lock it may hold next) does not wait for a round trip nobody needs."""
    if not _on_the_loop(_publish_on_loop, name, event, to_channel):
        async_to_sync(_publish)(name, event, to_channel)


def channel_send_quietly(channel: str, event: dict) -> None:
    """Send to one consumer's channel (not a group), without waiting for it."""
    _send_quietly(channel, event, to_channel=True)


def send_after_commit(name: str, event: dict, *, to_channel: bool = False) -> None:
    transaction.on_commit(lambda: _send_quietly(name, event, to_channel))


def dashboard_notify(team_id: int, kind: str, **data) -> None:
    """Tell the team's dashboards something changed; they re-read what they show."""
    event = {"type": "team.changed", "kind": kind, **data}
    transaction.on_commit(lambda: _ring_quietly(team_id, event))


def _ring_quietly(team_id: int, event: dict) -> None:
    if not _on_the_loop(dashboard_ring, team_id, event):
        async_to_sync(_publish)(dashboard_group(team_id), event)


# (loop, team id) -> while the team's interval runs, the latest ring folded into its closing one.
_rings: dict[tuple[asyncio.AbstractEventLoop, int], dict | None] = {}


def dashboard_ring(team_id: int, event: dict) -> None:
    """On the event loop: ring the team's dashboards now, or once at the end of
    the running interval with whatever rang during it."""
    loop = asyncio.get_running_loop()
    key = (loop, team_id)
    if key in _rings:  # an interval runs: fold this ring into its closing one
        _rings[key] = event
        return
    _rings[key] = None
    _publish_on_loop(dashboard_group(team_id), event, False)
    loop.call_later(DASHBOARD_RING_INTERVAL, _interval_over, key)


def rings_pending(team_id: int) -> bool:
    """On the event loop: whether a doorbell rung on this loop has still to go out: the
    team's interval is running (its closing ring may follow), or a publish is in flight.
    Only this loop's publishes count (a test's closed loop may leave one pending for good)."""
    loop = asyncio.get_running_loop()
    return (loop, team_id) in _rings or any(t.get_loop() is loop and not t.done() for t in _in_flight)


def _interval_over(key) -> None:
    folded = _rings.pop(key, None)
    if folded is not None:
        # The closing ring starts an interval of its own: a steady stream stays one ring per interval.
        dashboard_ring(key[1], folded)
