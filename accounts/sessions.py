"""Which browser sessions are still signed in: what a long-lived connection (a
dashboard websocket, frontend/consumers.py) asks again while it stays open,
since Django checks a session only when a request comes.

A session counts as signed in to the user it was opened for under the rules of
``django.contrib.auth.get_user``, read-only: the session exists and has not
expired, names that user and one of AUTHENTICATION_BACKENDS, the backend would
still let the user in (``is_active``, for ModelBackend), and the session's
hash still matches the user's password (or one of SECRET_KEY_FALLBACKS). So a
sign-out anywhere, a password reset (``manage.py operator_create NAME``), a
deactivated or deleted user and an expired or deleted session all end it.
"""
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.utils import timezone
from django.utils.crypto import constant_time_compare


def _session_data(session_keys: set[str]) -> dict[str, dict]:
    """The data of those sessions that exist and have not expired: one query for the
    database-backed engines (``db``, ``cached_db``: the database is the truth), else
    each session loaded by its engine."""
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if issubclass(store_class, DatabaseSessionStore):
        rows = store_class.get_model_class().objects.filter(
            session_key__in=session_keys, expire_date__gt=timezone.now()
        ).values_list("session_key", "session_data")
        store = store_class()
        return {key: store.decode(data) for key, data in rows}
    found = {}
    for key in session_keys:
        data = store_class(session_key=key).load()
        if data:
            found[key] = data
    return found


def sessions_signed_out(*, sessions: dict[str, str]) -> set[str]:
    """Of ``sessions`` (session key -> the id of the user it was signed in as, as a
    string), the keys that are no longer signed in as that user. Two queries."""
    data = _session_data(set(sessions))
    user_ids = {sessions[key] for key in data if data[key].get(SESSION_KEY) == sessions[key]}
    User = get_user_model()
    users = {str(user.pk): user for user in User.objects.filter(pk__in=user_ids)}
    return {key for key, user_id in sessions.items() if not _signed_in(data.get(key), users.get(user_id), user_id)}


def _signed_in(data: dict | None, user, user_id: str) -> bool:
    if data is None or user is None or data.get(SESSION_KEY) != user_id:
        return False
    backend_path = data.get(BACKEND_SESSION_KEY)
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return False
    backend = load_backend(backend_path)
    if hasattr(backend, "user_can_authenticate") and not backend.user_can_authenticate(user):
        return False
    session_hash = data.get(HASH_SESSION_KEY)
    if not session_hash:
        return False
    return constant_time_compare(session_hash, user.get_session_auth_hash()) or any(
        constant_time_compare(session_hash, fallback) for fallback in user.get_session_auth_fallback_hash()
    )
