"""Bearer-token authentication for agent sessions and hosts (REST and websockets).

A member token's lookup is cached in the process for ``TOKEN_CACHE_SECONDS``
(5 s by default): the hot path pays for it once per interval, not once per
call. A revoked token (its row deleted, mailbox/lifecycle.py) is dropped from
the revoking process's cache at once (``forget``) and stops working on every
other process within that bound; an unknown token is never cached, so a new
one works at once.
"""
import hashlib
import time

from django.conf import settings

from mailbox.db import to_db_thread
from teams.models import Member, Team
from teams.selectors import member_by_token, team_by_host_token

_MAX_CACHED = 10_000
# sha256(token) -> (expires at, member)
_members: dict[str, tuple[float, Member]] = {}


def bearer_from_headers(headers) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or ''."""
    for name, value in headers:
        key = name.decode("latin-1").lower() if isinstance(name, bytes) else name.lower()
        if key == "authorization":
            raw = value.decode("latin-1") if isinstance(value, bytes) else value
            scheme, _, token = raw.strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


def _key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def member_cached(token: str) -> Member | None:
    """The member of a token looked up within the cache interval, without the database."""
    if not token:
        return None
    hit = _members.get(_key(token))
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    return None


def forget(hashes) -> None:
    """Drop these tokens (their SHA-256 hex) from this process's cache: revoked."""
    for digest in hashes:
        _members.pop(digest, None)


def member_from_headers(headers) -> Member | None:
    token = bearer_from_headers(headers)
    if not token:
        return None
    member = member_cached(token)
    if member is not None:
        return member
    member = member_by_token(token=token)
    if member is not None:
        if len(_members) >= _MAX_CACHED:
            _members.clear()
        _members[_key(token)] = (time.monotonic() + settings.STEERBOARD["TOKEN_CACHE_SECONDS"], member)
    return member


async def member_of_request(headers) -> Member | None:
    """The member a request's bearer token names: from the cache on the event loop,
    else looked up on a database thread."""
    return member_cached(bearer_from_headers(headers)) or await to_db_thread(member_from_headers)(headers)


def host_team_from_headers(headers) -> Team | None:
    return team_by_host_token(token=bearer_from_headers(headers))
