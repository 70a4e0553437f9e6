"""Signing out closes the session's open dashboard sockets (frontend/consumers.py)."""
import hashlib
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

log = logging.getLogger(__name__)


def session_group(session_key: str) -> str:
    """The group of one dashboard session's sockets (a hash: the key itself never
    leaves the database, not even as a Redis channel name)."""
    return "dashboard-session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


@receiver(user_logged_out, dispatch_uid="frontend.dashboard_sockets_close")
def close_sockets_of_session(sender, request, user, **kwargs):
    """Every process's sockets of this session get ``session.ended`` and close with 4401."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if not session_key:
        return
    try:
        async_to_sync(get_channel_layer().group_send)(session_group(session_key), {"type": "session.ended"})
    except Exception:  # the sign-out itself must not fail on the channel layer
        log.warning("could not close the dashboard sockets of a signed-out session", exc_info=True)
