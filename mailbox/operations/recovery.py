"""Recovery: what puts undelivered messages back on their way after a crash,
a lost push, a dead process or a host that comes back.

``recovery_pass`` is one pass, run by each process's sweeper (mailbox/operations/sweeper.py)
every ``SWEEP_INTERVAL`` and by ``manage.py sweep``:

1. ``presence_reap``: the sessions and hosts of processes that stopped beating
   (mailbox/members/presence.py) are closed and dropped, and their members' undelivered
   messages admitted again at once;
2. ``messages_recover``: answer the ``ask_human`` asks past their deadline
   (decision ``expired``, mailbox/members/asks.py), reconcile (a message whose entry is in its target's
   history is marked delivered), admit what is queued, push again what was
   accepted and not delivered for ``REDELIVER_AFTER`` (backing off), and ask
   hosts to start members that wait for a provision or a prompt.

``presence_reconcile`` ends this process's own sessions and hosts whose websockets
closed without their detach (the database was out of reach then).
``host_catch_up`` runs the same for one team when a host connects (mailbox/members/hosts.py), and
``sessions_ring_again`` for the sessions this process holds when Redis comes
back (mailbox/plumbing/events.py runs it; mailbox/apps.py registers it). Every step
goes through the transitions of mailbox/engine/delivery.py; each is idempotent, so
several processes may recover at once.
"""
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from mailbox import selectors
from mailbox.engine import delivery, hot_path, idempotency, starts
from mailbox.engine.delivery import target_admit
from mailbox.members import asks, hosts, presence, sessions
from mailbox.members.presence import PROCESS_ID, timing
from mailbox.models import (
    PENDING_STATES, UNDELIVERED, HistoryEntry, HostPresence, MessageState, ServerProcess, SessionPresence, TeamMessage,
)
from mailbox.plumbing import events, faults, outage
from teams.models import Member, SessionState

log = logging.getLogger(__name__)


def recovery_pass() -> dict:
    """One pass: reap what dead processes left behind, then the delivery sweep.

    No reaping for ``PROCESS_TIMEOUT`` after this process saw the database come
    back: every process's heartbeat went stale while it was away, and the live
    ones need a beat or two to say so (docs/deployment.md)."""
    idempotency.prune_due()  # expired idempotency keys: at the first pass, then hourly
    back_at = outage.database.back_at
    if back_at is not None and time.monotonic() - back_at < settings.STEERBOARD["PROCESS_TIMEOUT"]:
        reaped = {}
    else:
        reaped = presence_reap()
    return {**messages_recover(), **reaped}


def messages_reconcile() -> int:
    """Mark delivered every message whose entry is in its target's history (a crash between the two)."""
    held = HistoryEntry.objects.filter(member_id=OuterRef("target_id"), message_id=OuterRef("pk"))
    found = list(
        TeamMessage.objects.filter(UNDELIVERED, state__in=PENDING_STATES)
        .filter(Exists(held))
        .order_by("state", "queued_at")  # walks the (state, queued_at) index; see messages_recover
        .values_list("pk", "target_id", "target__name", "team_id")[:500]
    )
    return hot_path.messages_mark_delivered(messages=found)


# Redelivery waits REDELIVER_AFTER, then 3x, then 7x that after the first acceptance (attempts 1, 2, 3+).
REDELIVERY_BACKOFF = (1, 3, 7)


def _redelivery_due(stale_before) -> set[int]:
    """Targets with an accepted, undelivered message due for another push.

    Each message backs off (REDELIVERY_BACKOFF, counted by its attempts), and a
    target whose session is on this process and still holds steers it has not
    reported is skipped: its websocket lost nothing, and pushing again would
    add work exactly when the session is behind. The query reads the pending
    few (the (state, queued_at) index), never the backlog a second time."""
    rows = (
        TeamMessage.objects.filter(UNDELIVERED, state=MessageState.ACCEPTED, accepted_at__lt=stale_before)
        .order_by("queued_at")
        .values_list("target_id", "accepted_at", "attempts")[:5000]
    )
    now, after = timezone.now(), settings.STEERBOARD["REDELIVER_AFTER"]
    due = set()
    for target_id, accepted_at, attempts in rows:
        factor = REDELIVERY_BACKOFF[min(max(attempts, 1), len(REDELIVERY_BACKOFF)) - 1]
        if accepted_at <= now - timedelta(seconds=after * factor):
            due.add(target_id)
    if due:
        channels = Member.objects.filter(pk__in=due).values_list("pk", "session_channel")
        due -= {pk for pk, channel in channels if events.session_awaits_entries(channel)}
    return due


def messages_recover() -> dict:
    """One pass of recovery: answer the asks past their deadline ("expired", a message like any
    answer: mailbox/members/asks.py), reconcile, admit what is queued, re-push what is stale."""
    expired = asks.asks_expire()
    reconciled = messages_reconcile()
    stale_before = timezone.now() - timedelta(seconds=settings.STEERBOARD["REDELIVER_AFTER"])
    # Ordered by queued_at, without DISTINCT: both databases then walk the (state,
    # queued_at) index over the pending few. With DISTINCT, SQLite scanned the whole
    # table through another index (130 ms per query at a million stored messages,
    # on the thread every websocket of the process shares).
    queued_targets = set(
        TeamMessage.objects.filter(UNDELIVERED, state=MessageState.QUEUED)
        .order_by("queued_at")
        .values_list("target_id", flat=True)[:5000]
    )
    stale_targets = _redelivery_due(stale_before)
    admitted = 0
    for target_id in sorted(queued_targets | stale_targets):
        faults.crash_point("mid_recovery")
        result = target_admit(target_id=target_id, redeliver=target_id in stale_targets, skip_locked=True)
        admitted += len(result.admitted) if result else 0
    provisioned = starts.members_start_pending()
    resumed = sum(starts.member_start(member_id=m) for m in selectors.members_awaiting_prompt())
    return {
        "reconciled": reconciled, "admitted": admitted, "provisioned": provisioned, "resumed_for_prompts": resumed,
        "asks_expired": expired,
    }


def sessions_ring_again(*, channels: list[str]) -> int:
    """Admit again (redeliver) every queued or accepted message of the members whose
    current session is one of ``channels``, in seq order per member: after Redis came
    back, for the doorbells those sessions may have missed (``events.redis_recovered``)."""
    if not channels:
        return 0
    members = sorted(Member.objects.filter(session_channel__in=channels).values_list("pk", flat=True))
    for member_id in members:
        target_admit(target_id=member_id, redeliver=True)
    return len(members)


def presence_reap() -> dict:
    """Close the sessions and drop the hosts of processes that stopped beating.

    Safe to run in every process at once: each step is idempotent, and closing a
    session only ends it while the member's current channel is still that one."""
    cutoff = timezone.now() - timedelta(seconds=timing("PROCESS_TIMEOUT"))
    live = set(ServerProcess.objects.filter(last_seen__gte=cutoff).values_list("pk", flat=True))
    live.add(PROCESS_ID)
    dead_sessions = list(
        SessionPresence.objects.exclude(process_id__in=live).values_list("channel", "member_id")[:1000]
    )
    ended = _sessions_end(dead_sessions)
    # A dead process's host rows only count hosts that are gone: one DELETE.
    hosts_dropped, _ = HostPresence.objects.exclude(process_id__in=live).delete()
    # Members still marked connected through a channel no process vouches for
    # (their presence row never committed, e.g. a crash inside the hello).
    vouched = SessionPresence.objects.values("channel")
    orphans = list(
        Member.objects.exclude(session_state=SessionState.INACTIVE)
        .exclude(session_channel="")
        .exclude(session_channel__in=vouched)
        .filter(status_changed_at__lt=cutoff)
        .values_list("pk", "session_channel")[:1000]
    )
    for member_id, channel in orphans:
        sessions.session_closed(member_id=member_id, channel=channel)
        ended.add(member_id)
    with transaction.atomic():
        gone = ServerProcess.objects.filter(last_seen__lt=cutoff).exclude(pk=PROCESS_ID)
        dead_ids = list(gone.values_list("pk", flat=True))
        gone.delete()
    _resume_elsewhere(ended)
    return {
        "dead_processes": len(dead_ids),
        "sessions_closed": len(ended),
        "hosts_dropped": hosts_dropped,
    }


def _sessions_end(pairs) -> set[int]:
    """Close these (channel, member id) sessions as a clean disconnect would; answers the
    members whose current session one of them was."""
    ended: set[int] = set()
    for channel, member_id in pairs:
        before = Member.objects.filter(pk=member_id, session_channel=channel).exists()
        sessions.session_closed(member_id=member_id, channel=channel)  # drops its presence row too
        if before:
            ended.add(member_id)
    return ended


def _resume_elsewhere(ended: set[int]) -> None:
    """Members whose session was closed for them: their undelivered messages go to a live
    host now (cold-resume), not after REDELIVER_AFTER."""
    for member_id in sorted(ended):
        delivery.target_admit(target_id=member_id, redeliver=True, skip_locked=True)


def presence_reconcile() -> dict:
    """This process's own presence rows against the websockets it really holds.

    A socket that closed while the database was out of reach could not write its
    detach: its member stayed ``running`` with a session nobody reads, its host row
    kept saying a host is connected, and admission pushed into the void. Each row of
    this process whose socket is gone is ended now exactly as that detach would have
    (mailbox/operations/sweeper.py runs this after a failed detach, when the database comes back,
    and now and then)."""
    rows = list(SessionPresence.objects.filter(process_id=PROCESS_ID).values_list("channel", "member_id"))
    host_rows = list(HostPresence.objects.filter(process_id=PROCESS_ID).values_list("channel", flat=True))
    # Read after the rows: a socket that opened since is in neither, one that closed since is a ghost
    # its own detach also ends (both are idempotent).
    held = presence.open_channels()
    ghosts = [(channel, member_id) for channel, member_id in rows if channel not in held]
    ended = _sessions_end(ghosts)
    gone_hosts = [channel for channel in host_rows if channel not in held]
    for channel in gone_hosts:
        hosts.host_disconnected(channel=channel)
    _resume_elsewhere(ended)
    if ghosts or gone_hosts:
        log.warning(
            "ended %d session(s) and %d host(s) whose websockets had closed without their detach",
            len(ghosts), len(gone_hosts),
        )
    return {"sessions_closed": len(ghosts), "hosts_dropped": len(gone_hosts)}


def host_catch_up(*, team_id: int) -> None:
    """A host arrived for the team (mailbox/members/hosts.py's ``host_arrived`` runs this, handed
    over by mailbox/apps.py): admit what waited for one (and push again what was accepted
    for a member whose start may have gone to a host that is gone), then start the
    members a prompt or an unfinished turn waits for."""
    waiting = (
        TeamMessage.objects.filter(UNDELIVERED, team_id=team_id, state=MessageState.QUEUED)
        .values_list("target_id", flat=True)
        .distinct()
    )
    # Accepted for an inactive target means a start went to a host that may be gone: ask this one.
    unresumed = set(
        TeamMessage.objects.filter(
            UNDELIVERED, team_id=team_id, state=MessageState.ACCEPTED, target__session_state=SessionState.INACTIVE
        )
        .values_list("target_id", flat=True)
        .distinct()
    )
    for target_id in sorted(set(waiting) | unresumed):
        delivery.target_admit(target_id=target_id, redeliver=target_id in unresumed)
    for member_id in sorted(
        set(selectors.members_awaiting_prompt(team_id=team_id)) | set(selectors.members_mid_turn(team_id=team_id))
    ):
        starts.member_start(member_id=member_id)
