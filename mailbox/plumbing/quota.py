"""Per-process, in-memory limits on what one member or one token may do
(docs/operations.md, "Quotas and rate limits").

- **History quota** (per member): one entry's JSON at most ``MAX_ENTRY_BYTES``;
  at most ``MAX_ENTRIES_PER_REQUEST`` entries in one ``POST /api/v1/session/entries``
  or unacknowledged on one agent websocket; at most ``HISTORY_BYTES_PER_MINUTE``
  bytes of entries a minute (a token bucket: that many may come at once, then
  they refill at a sixtieth of it a second).
- **Request rate** (per token): every request with a bearer token to the REST
  API (the agents' endpoints, and a member token's reads of the operator REST),
  ``/mcp`` and the tool frames of the agent websocket take ``RATE_LIMIT_PER_SECOND``
  requests a second per bearer token, with bursts up to ``RATE_LIMIT_BURST``.
- **Open websockets** (per token): at most ``MAX_SOCKETS_PER_TOKEN`` agent or host
  websockets of one token at once (mailbox/plumbing/auth.py counts them).

Each check is a dictionary lookup and a little arithmetic on the event loop's
thread: no SQL, no lock, no round trip. The buckets live in the server process:
a deployment of N processes behind a load balancer lets a member or token use up
to N times each budget (each process enforces its own share).
"""
import math
import time

from django.conf import settings

from mailbox.plumbing import runtime
from teams.errors import ErrorCode, TeamError

_MAX_KEYS = 10_000


# A level less than a millisecond's refill short of the cost is the cost: the clock's floats
# (seconds since 1970) are exact to a few tenths of a microsecond only, and a caller that
# waited exactly ``retry_after`` (rounded up to the millisecond) must not be refused for it.
_SLACK_SECONDS = 0.001


class Buckets:
    """Token buckets by key: ``rate`` units a second, at most ``burst`` saved up.

    ``clock`` is what they read the time from, in seconds: ``time.monotonic`` (the
    tests' ``clock`` fixture hands them a clock that moves only when the test moves it)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._levels: dict = {}  # key -> (level, the clock's time of the level)

    def take(self, key, cost: float, *, rate: float, burst: float) -> float:
        """Take ``cost`` units: 0.0 when taken, else the seconds until they would be
        there (and nothing is taken). A cost over ``burst`` is charged as ``burst``."""
        now = self.clock()
        cost = min(cost, burst)
        found = self._levels.get(key)
        level = burst if found is None else min(burst, found[0] + (now - found[1]) * rate)
        if level >= cost - rate * _SLACK_SECONDS:
            if found is None and len(self._levels) >= _MAX_KEYS:
                self._prune(now, rate, burst)
            self._levels[key] = (level - cost, now)
            return 0.0
        self._levels[key] = (level, now)
        return (cost - level) / rate

    def _prune(self, now: float, rate: float, burst: float) -> None:
        """Forget the buckets that are full again (a full bucket is what a new key gets)."""
        full = [k for k, (level, at) in self._levels.items() if level + (now - at) * rate >= burst]
        for key in full:
            del self._levels[key]
        if len(self._levels) >= _MAX_KEYS:  # all busy: forget the oldest half rather than grow
            for key in list(self._levels)[: _MAX_KEYS // 2]:
                del self._levels[key]

    def clear(self) -> None:
        self._levels.clear()


def _retry_after(wait: float) -> float:
    """The seconds a refusal tells the caller, rounded up to the millisecond: a retry that
    waits exactly this long finds what it needs (rounded to the nearest, it could be
    refused again with a retry_after of 0)."""
    return math.ceil(wait * 1000) / 1000


history = Buckets()
requests = Buckets()


@runtime.on_reset
def _buckets_full() -> None:
    """Every bucket full again (member ids and token hashes are reused by the next test's database)."""
    history.clear()
    requests.clear()


def _limits() -> dict:
    return settings.STEERBOARD


def retry_after_header(seconds: float) -> str:
    """Retry-After is whole seconds: at least 1."""
    return str(max(1, math.ceil(seconds)))


def entries_per_request() -> int:
    return _limits()["MAX_ENTRIES_PER_REQUEST"]


def too_many_entries(count: int) -> TeamError:
    limit = entries_per_request()
    return TeamError(
        ErrorCode.TOO_MANY_ENTRIES,
        f"At most {limit} entries in one request or unacknowledged on one socket; {count} were sent. "
        "Send fewer at once (wait for the acks).",
        limit=limit,
    )


def entry_charge(*, member_id: int, size: int) -> None:
    """Admit one history entry of ``size`` bytes (its JSON as stored) for a member, or
    raise: 413 ``HISTORY_ENTRY_TOO_LARGE`` over the entry size limit, 429
    ``HISTORY_QUOTA_EXCEEDED`` (with ``retry_after`` seconds) over the member's bytes a minute."""
    limits = _limits()
    largest = limits["MAX_ENTRY_BYTES"]
    if size > largest:
        raise TeamError(
            ErrorCode.HISTORY_ENTRY_TOO_LARGE,
            f"A history entry is at most {largest} bytes of JSON; this one is {size}.",
            limit=largest,
        )
    per_minute = limits["HISTORY_BYTES_PER_MINUTE"]
    wait = history.take(member_id, size, rate=per_minute / 60.0, burst=per_minute)
    if wait:
        raise TeamError(
            ErrorCode.HISTORY_QUOTA_EXCEEDED,
            f"This member may write {per_minute} bytes of history a minute; send this entry again "
            f"in {wait:.1f} s.",
            limit={"bytes_per_minute": per_minute},
            retry_after=_retry_after(wait),
        )


def request_charge(key, cost: int = 1) -> None:
    """Charge one request to a token (``key`` names it, e.g. its SHA-256), or raise
    429 ``RATE_LIMITED`` with the limit and ``retry_after`` seconds. ``cost``: a
    request that does the work of several counts as that many (an A2A ListTasks,
    docs/a2a.md)."""
    limits = _limits()
    rate, burst = limits["RATE_LIMIT_PER_SECOND"], limits["RATE_LIMIT_BURST"]
    wait = requests.take(key, cost, rate=rate, burst=burst)
    if wait:
        raise TeamError(
            ErrorCode.RATE_LIMITED,
            f"Too many requests with this token: at most {rate} a second (bursts of {burst}); "
            f"try again in {wait:.2f} s.",
            limit={"requests_per_second": rate, "burst": burst},
            retry_after=_retry_after(wait),
        )


def sockets_admit(open_now: int) -> None:
    """One more websocket for a token that holds ``open_now`` in this process, or
    429 ``TOO_MANY_CONNECTIONS`` with the limit."""
    limit = settings.STEERBOARD["MAX_SOCKETS_PER_TOKEN"]
    if open_now >= limit:
        raise TeamError(
            ErrorCode.TOO_MANY_CONNECTIONS,
            f"This token holds {open_now} open websockets on this server process, the most it may; close one first.",
            limit={"sockets_per_token": limit},
        )
