"""Idempotency keys of tool calls: one effect per (member, tool, key) within the window.

A call that carries ``idempotency_key`` claims the key in the same transaction
that makes its effect durable (a message snapshot with its ``queued`` record, a
task), so the key and the effect commit together or not at all. The unique
constraint on (member, tool, key) decides a race: the losing insert fails (on
PostgreSQL it first waits for the winner's commit; on SQLite writers are
serialised by ``BEGIN IMMEDIATE``) and the loser replays the winner's result.

=========================================  ==================================================
the key was                                the call
=========================================  ==================================================
never used, or used before the window      runs; its result is stored under the key
used with the same arguments               replays the stored result, ``idempotent_replay``
                                           true; nothing new is stored or sent
used with different arguments              409 ``IDEMPOTENCY_KEY_CONFLICT``
=========================================  ==================================================

A refused call (``TeamError``) rolls its claim back, so a retry runs again.
The window is ``STEERBOARD["IDEMPOTENCY_WINDOW"]`` seconds (7 days by default).
An expired key counts as unused even before it is pruned, so pruning only
bounds the table: each process prunes when it starts (its first recovery pass,
or its first keyed call, whichever comes first) and then hourly
(``prune_due``); ``manage.py sweep`` does too, and ``manage.py
idempotency_prune`` prunes at once, from cron or an operator's shell.
"""
import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import BaseModel

from mailbox.plumbing.db import to_db_thread
from mailbox.models import IdempotencyRecord
from teams.errors import ErrorCode, TeamError
from teams.models import Member

log = logging.getLogger(__name__)
DEFAULT_WINDOW = 7 * 24 * 3600.0
PRUNE_EVERY = 3600.0
_pruned_at: float | None = None
_prune_lock = threading.Lock()
_pruning: set = set()


def window() -> timedelta:
    return timedelta(seconds=settings.STEERBOARD.get("IDEMPOTENCY_WINDOW", DEFAULT_WINDOW))


# The arguments' canonical JSON (keys sorted, no spaces): one encoder, not one made per call
# as json.dumps makes for any argument but the defaults. Its output must never change: a
# stored key's fingerprint is compared with a retry's for the whole window.
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def fingerprint(arguments: BaseModel) -> str:
    """The hash of a call's arguments with their defaults, the key itself left out."""
    data = arguments.model_dump(mode="json", exclude={"idempotency_key"})
    return hashlib.sha256(_canonical(data).encode()).hexdigest()


def _claim(*, member: Member, tool: str, key: str, digest: str) -> tuple[IdempotencyRecord, bool]:
    """Inside the caller's transaction. Answers (record, claimed): claimed means go ahead."""
    now = timezone.now()
    for _ in range(2):
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    member=member, tool=tool, key=key, fingerprint=digest, created_at=now
                )
            return record, True
        except IntegrityError:
            pass
        existing = IdempotencyRecord.objects.filter(member=member, tool=tool, key=key).first()
        if existing is None:
            continue  # pruned between the insert and the read: claim again
        if existing.created_at < now - window():
            existing.delete()  # expired but not yet pruned: the key is free again
            continue
        if existing.fingerprint != digest:
            raise key_conflict(key, tool)
        return existing, False
    raise key_in_use(key)


def key_conflict(key: str, tool: str, **extra) -> TeamError:
    """The key was used for a call with other arguments (the tool's refusal extras are added
    where the call is dispatched, mailbox/transports/tools.py; ``extra``: a service's own, such as the
    send's ``persisted: false``, mailbox/engine/hot_path.py)."""
    return TeamError(
        ErrorCode.IDEMPOTENCY_KEY_CONFLICT,
        f"The idempotency key {key!r} was already used for a {tool} call with different arguments; "
        "repeat that call unchanged to get its result, or use a new key for a new call.",
        **extra,
    )


def key_in_use(key: str) -> TeamError:
    """Another call with the key was deciding it at the same moment; the retry finds its result."""
    return TeamError(ErrorCode.IDEMPOTENCY_KEY_CONFLICT, f"The idempotency key {key!r} is in use; try again.")


def run_once(
    *,
    member: Member,
    tool: str,
    arguments: BaseModel,
    perform: Callable[[], dict],
    finish: Callable[[dict], dict] | None = None,
    replay: Callable[[dict], dict] | None = None,
) -> dict:
    """Run a tool call at most once per idempotency key.

    ``perform`` makes the effect durable and returns the result (or the part of
    it known at commit); it runs inside the claim's transaction. ``finish``
    (optional) runs after that commit, e.g. admission, and returns the full
    result, which then replaces the stored one. ``replay`` (optional) completes
    a stored result whose ``finish`` has not run (yet).
    """
    key = getattr(arguments, "idempotency_key", None)
    if not key:
        durable = perform()
        return finish(durable) if finish else durable
    prune_due()
    digest = fingerprint(arguments)
    with transaction.atomic():
        record, claimed = _claim(member=member, tool=tool, key=key, digest=digest)
        if claimed:
            durable = perform()
            record.result = durable
            record.save(update_fields=["result"])
    if not claimed:
        stored = dict(record.result)
        if replay is not None:
            stored = replay(stored)
        return {**stored, "idempotent_replay": True}
    if finish is None:
        return durable
    result = finish(durable)
    IdempotencyRecord.objects.filter(pk=record.pk).update(result=result)
    return result


def keys_prune(*, now=None) -> int:
    """Delete the keys older than the window; answers how many went."""
    cutoff = (now or timezone.now()) - window()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def _due() -> bool:
    return _pruned_at is None or time.monotonic() - _pruned_at >= PRUNE_EVERY


def prune_due() -> None:
    """Prune at this process's first keyed call, then at most hourly."""
    global _pruned_at
    with _prune_lock:
        if not _due():
            return
        _pruned_at = time.monotonic()
    try:
        keys_prune()
    except Exception:  # pruning only bounds the table; the next hour tries again
        log.warning("pruning idempotency keys failed", exc_info=True)


def prune_soon() -> None:
    """From the event loop, for a keyed call on the writer: prune on a database thread when
    due, without the call waiting for it (an expired key counts as unused either way)."""
    if not _due():
        return
    task = asyncio.ensure_future(to_db_thread(prune_due)())
    _pruning.add(task)
    task.add_done_callback(_pruning.discard)
