"""Channel-layer group names and publishing.

Every publish is a doorbell: at most once, possibly lost, always recoverable
from the database. Publishes that describe a write go out after its commit.
What is for an agent session (steer, prompt, interrupt) goes to the one
channel that speaks for the member now, ``Member.session_channel``, not to a
group: an older websocket of the member, or one on a process taken for dead
that Redis pub/sub keeps subscribed, hears nothing and catches up in the
replay of its next hello.
"""
import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from mailbox import db

log = logging.getLogger(__name__)
_in_flight: set[asyncio.Task] = set()


def host_group(team_id: int) -> str:
    return f"host.{team_id}"


def dashboard_group(team_id: int) -> str:
    return f"dashboard.{team_id}"


def send_now(name: str, event: dict, *, to_channel: bool = False) -> None:
    """Publish at once to the group ``name`` (or the one channel ``name``); raises
    when the channel layer is down (admission uses that)."""
    layer = get_channel_layer()
    async_to_sync(layer.send if to_channel else layer.group_send)(name, event)


async def _publish(name: str, event: dict, to_channel: bool = False) -> None:
    """To the group ``name``, or to the one channel ``name``."""
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
    send_after_commit(dashboard_group(team_id), {"type": "team.changed", "kind": kind, **data})
