"""Channel-layer group names and publishing.

Every publish is a doorbell: at most once, possibly lost, always recoverable
from the database. Publishes that describe a write go out after its commit.
"""
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def session_group(member_id: int) -> str:
    return f"session.{member_id}"


def host_group(team_id: int) -> str:
    return f"host.{team_id}"


def dashboard_group(team_id: int) -> str:
    return f"dashboard.{team_id}"


def send_now(group: str, event: dict) -> None:
    """Publish at once; raises when the channel layer is down (admission uses that)."""
    async_to_sync(get_channel_layer().group_send)(group, event)


def _send_quietly(group: str, event: dict) -> None:
    try:
        send_now(group, event)
    except Exception:  # a lost doorbell is recovered from the database
        log.warning("publish to %s failed", group, exc_info=True)


def send_after_commit(group: str, event: dict) -> None:
    transaction.on_commit(lambda: _send_quietly(group, event))


def dashboard_notify(team_id: int, kind: str, **data) -> None:
    """Tell the team's dashboards something changed; they re-read what they show."""
    send_after_commit(dashboard_group(team_id), {"type": "team.changed", "kind": kind, **data})
