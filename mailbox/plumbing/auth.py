"""Bearer-token authentication for agent sessions and hosts (REST and websockets),
and revocation reaching the agent websockets already open.

A member token's lookup is cached in the process for ``TOKEN_CACHE_SECONDS``
(5 s by default): the hot path pays for it once per interval, not once per
call. A revoked token (its row deleted, mailbox/members/lifecycle.py and a superseded
start token, mailbox/members/hosts.py) is dropped from the revoking process's cache at
once (``forget``) and stops working on every other process within that bound;
an unknown token is never cached, so a new one works at once.

An agent websocket is authenticated once, at its handshake, and then speaks for
its token until it closes, so revocation has to reach it too. Each socket
registers the token it came with (``socket_opened``); every frame it receives is
checked (``token_alive``: no database while the revokes below were read within the
interval; else the token's cached lookup, looked up again when it expired, as for
REST), and ``forget`` closes this process's sockets of a revoked token at once. Every revoke is also written down for an hour
(``RevokedToken``, teams/tokens.py), and each process that holds websockets reads
the last moments' revokes every half ``TOKEN_CACHE_SECONDS`` (``revocations_read``:
a few rows, however many sockets it holds) and forgets those tokens, which closes
their sockets (4401). A revoked token's socket is therefore refused and closed
within ``TOKEN_CACHE_SECONDS`` on every process, the bound REST has.
"""
import asyncio
import collections
import contextvars
import logging
import threading
import time
from datetime import timedelta
from collections.abc import Iterable
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from mailbox.plumbing.db import to_db_thread
from mailbox.plumbing import outage
from teams.models import Member, MemberToken, RevokedToken, Team
from teams.selectors import member_by_token, team_by_host_token
from teams.tokens import token_hash

log = logging.getLogger(__name__)

_MAX_CACHED = 10_000
# sha256(token) -> (expires at, member)
_members: dict[str, tuple[float, Member]] = {}


class TokenSocket(Protocol):
    """An agent websocket this process holds (mailbox/transports/consumers.AgentConsumer)."""

    def token_revoked(self) -> None:
        """On its event loop: refuse every further frame and close (4401)."""


# What every surface answers a request without a valid member token (401 UNAUTHENTICATED:
# REST, /mcp, the agents' API behind config/asgi.py): one wording, whoever asks.
MEMBER_TOKEN_MISSING = "Send 'Authorization: Bearer <member token>' (manage.py member_token TEAM MEMBER)."

# sha256(member token) -> the agent websockets open with it, each with the event loop it runs on.
_sockets: dict[str, dict[TokenSocket, asyncio.AbstractEventLoop]] = {}
# sha256(host token) -> how many host websockets are open with it (counted for the cap only).
_host_sockets: collections.Counter[str] = collections.Counter()
_sockets_lock = threading.Lock()
_recheck: asyncio.Task | None = None
# Revokes from this time on are read next (revocations_read); None: check every held token.
_revoked_since = None
# When (monotonic) the last read of the revokes that succeeded began.
_revokes_read_at = float("-inf")
REVOKE_READ_OVERLAP = timedelta(seconds=30)


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


def _cache(digest: str, member: Member, now: float | None = None) -> None:
    if len(_members) >= _MAX_CACHED:
        _members.clear()
    _members[digest] = ((now or time.monotonic()) + settings.STEERBOARD["TOKEN_CACHE_SECONDS"], member)


def token_alive(digest: str) -> bool:
    """Whether an open websocket's token is known to be alive without the database: the
    revokes were read within the cache interval (a revoked token's sockets are closed
    by then: ``revocations_read``), or the token's lookup is cached."""
    now = time.monotonic()
    if now - _revokes_read_at < settings.STEERBOARD["TOKEN_CACHE_SECONDS"]:
        return True
    hit = _members.get(digest)
    return hit is not None and hit[0] > now


def member_cached(token: str) -> Member | None:
    """The member of a token looked up within the cache interval, without the database."""
    if not token:
        return None
    hit = _members.get(token_hash(token))
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    return None


def forget(hashes: Iterable[str]) -> None:
    """These tokens (their SHA-256 hex) are revoked: drop them from this process's
    cache, and close this process's websockets that were opened with them."""
    closing: list[tuple[TokenSocket, asyncio.AbstractEventLoop]] = []
    with _sockets_lock:
        for digest in hashes:
            _members.pop(digest, None)
            closing.extend(_sockets.get(digest, {}).items())
    for socket, loop in closing:
        try:
            loop.call_soon_threadsafe(socket.token_revoked)
        except RuntimeError:  # that loop has closed: so has the socket
            pass


def member_from_headers(headers) -> Member | None:
    token = bearer_from_headers(headers)
    if not token:
        return None
    member = member_cached(token)
    if member is not None:
        return member
    member = member_by_token(token=token)
    if member is not None:
        _cache(token_hash(token), member)
    return member


async def member_of_request(headers) -> Member | None:
    """The member a request's bearer token names: from the cache on the event loop,
    else looked up on a database thread."""
    return member_cached(bearer_from_headers(headers)) or await to_db_thread(member_from_headers)(headers)


def host_team_from_headers(headers) -> Team | None:
    return team_by_host_token(token=bearer_from_headers(headers))


# --- the websockets open with each token ----------------------------------------------------
def sockets_open(digest: str) -> int:
    """How many agent websockets this process holds that were opened with this token."""
    return len(_sockets.get(digest, ()))


def socket_opened(digest: str, socket: TokenSocket) -> None:
    """From the socket's event loop, once its token was found: revoking the token closes it."""
    loop = asyncio.get_running_loop()
    with _sockets_lock:
        _sockets.setdefault(digest, {})[socket] = loop
    _recheck_ensure(loop)


def socket_closed(digest: str, socket: TokenSocket) -> None:
    with _sockets_lock:
        held = _sockets.get(digest)
        if held is not None:
            held.pop(socket, None)
            if not held:
                del _sockets[digest]


def host_sockets_open(digest: str) -> int:
    return _host_sockets[digest]


def host_socket_opened(digest: str) -> None:
    _host_sockets[digest] += 1


def host_socket_closed(digest: str) -> None:
    _host_sockets[digest] -= 1
    if _host_sockets[digest] <= 0:
        del _host_sockets[digest]


def token_recheck(digest: str) -> Member | None:
    """On a database thread: the member of a token whose cached lookup expired, cached
    again; None (and the token forgotten, its websockets closed) when it is gone."""
    row = MemberToken.objects.select_related("member__team").filter(token_hash=digest).first()
    if row is None:
        forget([digest])
        return None
    _cache(digest, row.member)
    return row.member


def revocations_read() -> int:
    """On a database thread: close this process's websockets of the tokens revoked since
    the last read (by any process: teams/tokens.py writes each revoke down in
    ``RevokedToken``). A read asks only for the last moments' revokes, a few rows at most;
    the first read, and the first after one that failed, checks every token this process
    holds a websocket of instead (nothing between the two reads is missed). Answers how
    many tokens were found revoked."""
    global _revoked_since, _revokes_read_at
    with _sockets_lock:
        held = list(_sockets)
    started, started_monotonic = timezone.now(), time.monotonic()
    if not held:
        _revoked_since = None  # nothing to close; the next socket's read starts afresh
        return 0
    if _revoked_since is None:
        alive: set[str] = set()
        for start in range(0, len(held), 500):  # well under every database's bound on query parameters
            chunk = held[start : start + 500]
            alive.update(MemberToken.objects.filter(token_hash__in=chunk).values_list("token_hash", flat=True))
        revoked = [digest for digest in held if digest not in alive]
    else:
        revoked = list(
            RevokedToken.objects.filter(revoked_at__gte=_revoked_since).values_list("token_hash", flat=True).distinct()
        )
    # The next read overlaps this one generously: a revoke written with another process's clock,
    # or committed just after this read began, is read again rather than missed (forgetting is idempotent).
    _revoked_since = started - REVOKE_READ_OVERLAP
    if revoked:
        forget(revoked)
    _revokes_read_at = started_monotonic
    return len(revoked)


async def _recheck_loop() -> None:
    global _revoked_since
    while True:
        await asyncio.sleep(settings.STEERBOARD["TOKEN_CACHE_SECONDS"] / 2)
        if not _sockets:
            continue
        try:
            await to_db_thread(revocations_read)()
        except Exception as exc:
            _revoked_since = None  # the next read checks every held token
            # Out of reach: the sockets' tokens fall out of the cache, and their next
            # frames look the token up again (and are answered as the outage says).
            if outage.noted(exc, "reading revoked tokens") is None:
                log.warning("reading revoked tokens failed; trying again next interval", exc_info=True)


def _recheck_ensure(loop: asyncio.AbstractEventLoop) -> None:
    global _recheck
    if _recheck is not None and not _recheck.done() and _recheck.get_loop() is loop:
        return
    # A context of its own: started from inside a connection, it must not inherit (and outlive) its context.
    _recheck = loop.create_task(_recheck_loop(), context=contextvars.Context())
