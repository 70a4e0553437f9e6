"""The open dashboard sockets (frontend/consumers.py) of a session that ends close.

Signing out closes that session's sockets. ``user_logged_out`` fires before
Django deletes the session, so the receiver only notes the session on the
request; ``SignedOutSockets`` (a middleware) closes its sockets once the
sign-out's view has returned. Closed any earlier, a page sent to the login page
could get there while the session still held, and be sent on, signed in, to
where it was.

A change to a user (a password reset, ``is_active`` off, the user deleted: any
save but a sign-in's ``last_login``) rings that user's sockets on every process
after the commit; each process then checks its sockets' sessions again at once
(accounts/sessions.py) and closes those no longer signed in. The doorbell can be
lost (a command on the embedded default reaches no daphne; Redis away): each
process checks every ``SESSION_RECHECK_INTERVAL`` seconds as well.
"""
import hashlib
import logging

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from mailbox.plumbing import events

log = logging.getLogger(__name__)
SIGNED_OUT = "steerboard_signed_out_session"  # the request attribute the receiver sets


def session_group(session_key: str) -> str:
    """The group of one dashboard session's sockets (a hash: the key itself never
    leaves the database, not even as a Redis channel name)."""
    return "dashboard-session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def user_group(user_id) -> str:
    """The group of every dashboard socket of one user, whatever its session."""
    return f"dashboard-user.{user_id}"


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="frontend.dashboard_user_changed")
def user_changed(sender, instance, update_fields=None, **kwargs):
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return  # a sign-in: no session of the user ends by it
    events.send_after_commit(user_group(instance.pk), {"type": "session.check"})


@receiver(post_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="frontend.dashboard_user_deleted")
def user_deleted(sender, instance, **kwargs):
    events.send_after_commit(user_group(instance.pk), {"type": "session.check"})


@receiver(user_logged_out, dispatch_uid="frontend.dashboard_sockets_close")
def note_signed_out_session(sender, request, user, **kwargs):
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:  # (no request, no session)
        setattr(request, SIGNED_OUT, session_key)


async def _sockets_close(session_key: str) -> None:
    """Every process's sockets of this session get ``session.ended`` and close with 4401."""
    try:
        await get_channel_layer().group_send(session_group(session_key), {"type": "session.ended"})
    except Exception:  # the sign-out itself must not fail on the channel layer
        log.warning("could not close the dashboard sockets of a signed-out session", exc_info=True)


class SignedOutSockets:
    """After a request that signed a session out (any sign-out view: the dashboard's,
    the admin's), close that session's dashboard sockets."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        response = self.get_response(request)
        session_key = getattr(request, SIGNED_OUT, None)
        if session_key:
            async_to_sync(_sockets_close)(session_key)
        return response

    async def _acall(self, request):
        response = await self.get_response(request)
        session_key = getattr(request, SIGNED_OUT, None)
        if session_key:
            await _sockets_close(session_key)
        return response
