"""What a process does while PostgreSQL or Redis is out of reach (docs/deployment.md,
"When PostgreSQL or Redis goes away").

Each dependency has one ``Dependency`` per process that says whether it is
reachable as this process last saw it, and keeps the logs short: one warning
when it goes, a count of what failed every ``COUNT_EVERY`` seconds while it is
away (with the latest failure's own words: the driver's error, which names the
host and port and is shown to no client), one line when it is back (no
traceback per failure). Whoever sees a failure calls ``failed``; whoever sees
it work again calls ``ok``. Callbacks
registered with ``on_back`` run when it comes back (the sweeper's and the
channel layer's recovery passes).

A database that cannot be reached is not a bug: callers answer 503
``SERVICE_UNAVAILABLE`` with ``Retry-After`` (``unavailable_body``), and
websocket frames that needed it get an ``error`` frame with that code.
"""
import logging
import sqlite3
import threading
import time
from collections.abc import Callable

from django import db as django_db

from mailbox.plumbing import log_context
from mailbox.plumbing.faults import TemporaryDeliveryError
from teams.errors import ErrorCode, TeamError

log = logging.getLogger("steerboard.outage")

COUNT_EVERY = 10.0  # seconds between "still unreachable" lines
RETRY_AFTER = 1  # seconds, the Retry-After of a 503


class Dependency:
    def __init__(self, name: str):
        self.name = name
        self.down_since: float | None = None
        self.back_at: float | None = None  # monotonic time of the last return
        self.failures = 0
        # Bumped whenever connections may have gone bad (the dependency went away, or
        # one was found broken): mailbox/plumbing/db.py's threads then open fresh ones.
        self.generation = 0
        self._counted_at = 0.0
        self._lock = threading.Lock()
        self._on_back: list[Callable[[], None]] = []

    @property
    def up(self) -> bool:
        return self.down_since is None

    def on_back(self, callback: Callable[[], None]) -> None:
        if callback not in self._on_back:
            self._on_back.append(callback)

    def failed(self, what: str, exc: BaseException | None = None) -> None:
        """Something that needed the dependency failed (from any thread)."""
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            if self.down_since is None:
                self.down_since = self._counted_at = now
                self.generation += 1
                first = True
            else:
                first = False
                due = now - self._counted_at >= COUNT_EVERY
                if due:
                    self._counted_at = now
            down_since, failures = self.down_since, self.failures
        if first:
            log.warning("%s unreachable (%s: %s); failures are counted until it is back",
                        self.name, what, _short(exc))
        elif due:
            log.warning("%s still unreachable after %.0fs: %d failures so far (the latest, %s: %s)",
                        self.name, now - down_since, failures, what, _short(exc))

    def suspect(self) -> None:
        """A connection was found broken (the server restarted): the others may be too."""
        self.generation += 1

    def ok(self) -> bool:
        """It worked; True when that is a return (after which the callbacks have run)."""
        if self.down_since is None:  # the common case: no lock
            return False
        with self._lock:
            if self.down_since is None:
                return False
            away, failures = time.monotonic() - self.down_since, self.failures
            self.down_since, self.failures = None, 0
            self.back_at = time.monotonic()
        log.warning("%s reachable again after %.1fs (%d failures meanwhile)", self.name, away, failures)
        for callback in list(self._on_back):
            try:
                callback()
            except Exception:
                log.warning("a recovery step after %s came back failed", self.name, exc_info=True)
        return True

    def state(self) -> dict:
        if self.down_since is None:
            return {"ok": True}
        return {"ok": False, "down_for": round(time.monotonic() - self.down_since, 1), "failures": self.failures}


database = Dependency("PostgreSQL")
redis = Dependency("Redis")


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    try:  # the writer runs psycopg's own cursors: its errors are not wrapped by Django
        import psycopg

        found += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:  # pragma: no cover - SQLite only
        pass
    try:
        from psycopg_pool import PoolTimeout

        found.append(PoolTimeout)
    except ImportError:  # pragma: no cover
        pass
    return tuple(found)


_UNAVAILABLE = _driver_errors()
_DJANGO = (django_db.OperationalError, django_db.InterfaceError)


class LayerUnavailable(TemporaryDeliveryError):
    """A publish that had to go out now (an admission's push, a start request, an
    interrupt) could not: Redis is away. Admission keeps the messages queued."""


def unavailable(exc: BaseException | None) -> str | None:
    """What an exception says could not be reached just now ("database", "Redis"),
    or None: a PostgreSQL connection refused or lost, a server shutting down, a
    pool or lock timeout, a publish that had to go out. Worth a 503 and a retry,
    not a 500. On SQLite only a lock that did not come free counts: its other
    OperationalErrors (no such column, a syntax error) are bugs."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, LayerUnavailable):
            return "Redis"
        if isinstance(exc, _UNAVAILABLE):
            return "database"
        if isinstance(exc, sqlite3.Error):
            return "database" if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc) else None
        if isinstance(exc, _DJANGO) and exc.__cause__ is None:
            return "database"  # raised by Django itself (e.g. a connection already closed)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def noted(exc: BaseException | None, where: str) -> str | None:
    """``unavailable(exc)``, and a database failure counted (Redis counts its own, mailbox/plumbing/events.py)."""
    what = unavailable(exc)
    if what == "database":
        database.failed(where, exc)
    return what


def unavailable_body(what: str = "database", *, persisted: bool | None = False) -> dict:
    extra = {} if persisted is None else {"persisted": persisted}
    message = f"The server cannot reach its {what} just now; try again in {RETRY_AFTER} s."
    return TeamError(ErrorCode.SERVICE_UNAVAILABLE, message, **extra).as_wire()


def unavailable_headers() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER)}


def unavailable_frame(what: str = "database") -> dict:
    """The websocket ``error`` frame for a frame that needed the database (or Redis)."""
    return {"type": "error", **unavailable_body(what, persisted=None)}


def _counted(record: logging.LogRecord) -> bool:
    """A request that failed because the database was out of reach is answered 503 and
    counted; Django would also log its traceback (django.request), once per request. The
    count says it; the "Service Unavailable" line stays."""
    return unavailable(record.exc_info[1] if record.exc_info else None) is not None


def install_log_filter() -> None:
    """From MailboxConfig.ready: once per process."""
    log_context.traceback_left_out("django.request", _counted)

