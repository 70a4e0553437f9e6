"""The delivery state machine of team messages. Everything else calls this module.

A message moves only forward:

=============  ===========================================  ============  ==========================
from           event                                        to            Lead log record
=============  ===========================================  ============  ==========================
(none)         send_message commits the snapshot            queued        team/message/queued
queued         admission: target running or idle, steer     accepted      team/message/accepted
               pushed to its current session's channel
queued         admission: target inactive, a host is        accepted      team/message/accepted
               connected and asked to resume it
queued         temporary inspection/resume/admission        queued        team/message/failed
               failure (no host, channel layer down, ...)   (attempts+1)  (an observation)
queued or      the target's session reports the history     delivered     team/message/delivered
accepted       entry that carries this message id
accepted       recovery: undelivered for REDELIVER_AFTER,   accepted      team/message/accepted
               or a session says hello: pushed again
=============  ===========================================  ============  ==========================

Rules the functions below keep:

- The snapshot and its ``queued`` record commit in one transaction before any
  admission starts (durable before delivery).
- Admission is serialised per target by a row lock on the target member and
  always takes every earlier pending message of that target first, in seq
  (Lead-log) order.
- ``delivered`` is written only after the target's history holds the entry with
  that message id; the history's unique (member, message_id) constraint folds a
  repeated entry, and ``delivered`` itself is unique per message.
- Recovery (a session's hello, the periodic sweeper, an operator's retry) runs
  the same admission again; pushes are doorbells and may repeat.
"""
import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from mailbox import events, faults, selectors, sqlcount
from mailbox import writer as _writer
from mailbox.models import (
    HistoryEntry,
    HostPresence,
    LeadLogRecord,
    LogKind,
    MessageKind,
    MessageState,
    TeamMessage,
    message_id_new,
)
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, SessionState, Status, status_of
from teams.tokens import start_token_create

log = logging.getLogger(__name__)


_PENDING = (MessageState.QUEUED, MessageState.ACCEPTED)


def _limit(name: str) -> int:
    return settings.STEERBOARD[name]


def message_wire(message: TeamMessage, *, sender_name: str | None = None, target_name: str | None = None) -> dict:
    """The message as a `steer` event carries it (docs/protocol.md)."""
    return {
        "id": message.id,
        "sender": sender_name or message.sender.name,
        "target": target_name or message.target.name,
        "content": message.content,
        "seq": message.seq,
        "created_at": message.created_at.isoformat().replace("+00:00", "Z"),
        "thread_id": message.thread_id or message.id,
        "kind": message.kind,
    }


# --- 1. enqueue -----------------------------------------------------------------------
def message_validate(*, sender: Member, target_name: str, content: str) -> None:
    """The checks of a send that need no database (the ORM path and the hot path alike)."""
    if len(content.encode("utf-8")) > _limit("MAX_MESSAGE_BYTES"):
        raise TeamError(
            ErrorCode.TEAM_MESSAGE_TOO_LARGE,
            f"A message may hold at most {_limit('MAX_MESSAGE_BYTES')} bytes of UTF-8; shorten it or link a record.",
            persisted=False,
        )
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "A message needs some content.", persisted=False)
    if target_name == sender.name:
        raise TeamError(ErrorCode.TEAM_SELF_MESSAGE, "A member cannot message itself.", persisted=False)


def message_enqueue(*, sender: Member, target_name: str, content: str, reply_to: str = "") -> TeamMessage:
    """Validate and durably store a message with its `queued` record. No admission here."""
    message_validate(sender=sender, target_name=target_name, content=content)
    with transaction.atomic():
        target = Member.objects.select_for_update(no_key=True).filter(team_id=sender.team_id, name=target_name).first()
        if target is None:
            raise TeamError(
                ErrorCode.TEAM_UNKNOWN_TARGET,
                f"No member named {target_name!r} on this team; list_agents shows the roster.",
                persisted=False,
            )
        _refuse_phase(target)
        # state IN (...) rather than != delivered: an index range over the pending few, not the whole inbox.
        pending = TeamMessage.objects.filter(target=target, state__in=_PENDING).count()
        if pending >= _limit("MAX_PENDING_PER_TARGET"):
            raise TeamError(
                ErrorCode.TEAM_MAILBOX_FULL,
                f"{target_name} already has {pending} undelivered messages; wait for it to catch up (wait_agent).",
                persisted=False,
            )
        thread_id = ""
        if reply_to:
            original = TeamMessage.objects.filter(pk=reply_to, team_id=sender.team_id, target=sender).first()
            if original is None:
                raise TeamError(
                    ErrorCode.NOT_FOUND, f"You received no message {reply_to!r} to reply to.", persisted=False
                )
            thread_id = original.thread_id or original.id
        return _message_store(sender=sender, target=target, content=content, thread_id=thread_id, reply_to=reply_to)


def spawn_prompt_enqueue(*, lead: Member, teammate: Member, prompt: str) -> TeamMessage:
    """Store a new teammate's spawn prompt as the first message of its inbox (seq 1), from the
    Lead, in the spawn's transaction: it is delivered like any message, so it is durable before
    the host is asked to start the teammate and reaches it exactly once, as its first turn."""
    if len(prompt.encode("utf-8")) > _limit("MAX_MESSAGE_BYTES"):
        raise TeamError(
            ErrorCode.TEAM_MESSAGE_TOO_LARGE,
            f"A spawn prompt is delivered as a message: at most {_limit('MAX_MESSAGE_BYTES')} bytes of UTF-8.",
        )
    return _message_store(sender=lead, target=teammate, content=prompt, kind=MessageKind.SPAWN_PROMPT)


def _refuse_phase(target: Member) -> None:
    """A retired or failed member takes no messages (nothing is stored)."""
    if target.phase == Phase.RETIRED:
        raise TeamError(
            ErrorCode.TEAM_TARGET_RETIRED, f"{target.name} is retired and takes no messages.", persisted=False
        )
    if target.phase == Phase.FAILED:
        raise TeamError(
            ErrorCode.TEAM_TARGET_FAILED,
            f"{target.name} failed to start (its host could not provision it) and takes no messages; "
            "an operator can retry its start from the dashboard.",
            persisted=False,
        )


def _message_store(
    *, sender: Member, target: Member, content: str, thread_id: str = "", reply_to: str = "",
    kind: str = MessageKind.MESSAGE,
) -> TeamMessage:
    """The snapshot, its seq and its `queued` record (inside the caller's transaction, target row locked)."""
    now = timezone.now()
    message = TeamMessage.objects.create(
        team_id=sender.team_id,
        sender=sender,
        target=target,
        content=content,
        seq=target.next_seq,
        thread_id=thread_id,
        reply_to=reply_to,
        kind=kind,
        queued_at=now,
    )
    Member.objects.filter(pk=target.pk).update(next_seq=F("next_seq") + 1)
    LeadLogRecord.objects.create(
        team_id=sender.team_id,
        kind=LogKind.MESSAGE_QUEUED,
        message=message,
        data={"sender": sender.name, "target": target.name, "seq": message.seq},
    )
    events.dashboard_notify(sender.team_id, "message", message_id=message.id, target=target.name)
    message.sender, message.target = sender, target
    return message


# --- 2. admission -----------------------------------------------------------------------
@dataclass
class Admission:
    target_status: str
    admitted: list[str]
    error: str = ""
    # Looked up only for a target without a session (None: not looked up); the
    # sender's answer asks when it needs to (delivery_observation).
    host_connected: bool | None = None


def host_connected(team_id: int) -> bool:
    return HostPresence.objects.filter(team_id=team_id).exists()


def _start_request(*, member: Member, reason: str) -> None:
    """Ask the team's hosts to start this member's session (with a fresh token; it
    revokes the member's earlier start token, teams/tokens.py)."""
    token, revoked = start_token_create(member=member)
    if revoked:
        from mailbox import auth

        transaction.on_commit(lambda: auth.forget(revoked))
    faults.inject("resume")
    events.send_now(
        events.host_group(member.team_id),
        {"type": "host.start", "member": member.name, "token": token, "reason": reason},
    )
    Member.objects.filter(pk=member.pk).update(start_requested_at=timezone.now())


def _start_reason(status: str) -> str:
    """A member that never ran (provisioning, or failed to provision) is provisioned; others resumed."""
    return "provision" if status in (Status.PROVISIONING, Status.FAILED) else "resume"


def _start_is_fresh(member: Member) -> bool:
    return member.start_requested_at is not None and timezone.now() - member.start_requested_at < timedelta(
        seconds=settings.STEERBOARD["REDELIVER_AFTER"]
    )


def member_start(*, member_id: int) -> bool:
    """Ask a host to start a member that has no session, for work that waits for one
    (a human prompt). Answers whether a start was sent."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).filter(pk=member_id).first()
        if member is None:
            return False
        status = member.status
        if status not in (Status.INACTIVE, Status.FAILED, Status.PROVISIONING) or _start_is_fresh(member):
            return False
        if not host_connected(member.team_id):
            return False
        try:
            _start_request(member=member, reason=_start_reason(status))
        except Exception:
            log.warning("could not ask a host to start %s", member, exc_info=True)
            return False
    return True


def target_admit(
    *, target_id: int, redeliver: bool = False, skip_locked: bool = False, push: bool = True
) -> Admission | None:
    """Admit every queued message of one target, in seq order.

    ``redeliver`` also pushes accepted-but-undelivered messages again (recovery).
    ``skip_locked`` returns None at once when another worker holds the target.
    ``push=False`` admits a running or idle target's messages without steering
    them: a hello's replay carries every undelivered message once, itself.
    """
    with transaction.atomic():
        # NO KEY UPDATE of the member row only (not the joined team): it serialises admission per
        # target without blocking the foreign-key checks of inserts that reference the member or
        # the team (those take KEY SHARE); plain FOR UPDATE deadlocked two members messaging
        # each other on PostgreSQL, and locked the whole team.
        rows = Member.objects.select_for_update(skip_locked=skip_locked, no_key=True, of=("self",)).filter(pk=target_id)
        target = rows.first()
        if target is None:
            return None
        states = [MessageState.QUEUED, MessageState.ACCEPTED] if redeliver else [MessageState.QUEUED]
        pending = selectors.pending_of(target=target, states=states)
        status = target.status
        # A running or idle target only gets pushes: it needs no host, and nothing
        # to undo if a push fails. A resume writes (a token, the start request), so
        # it runs in a savepoint: a failed attempt leaves no half-written row behind.
        pushes_only = status in (Status.RUNNING, Status.IDLE)
        has_host = None if pushes_only else host_connected(target.team_id)
        if not pending:
            return Admission(target_status=status, admitted=[], host_connected=has_host)
        try:
            with contextlib.nullcontext() if pushes_only else transaction.atomic():
                _admission_attempt(target=target, status=status, has_host=has_host, pending=pending, push=push)
        except Exception as exc:  # temporary: inspection, resume or admission failed
            error = str(exc) or exc.__class__.__name__
            if not isinstance(exc, faults.TemporaryDeliveryError):
                log.warning("admission to %s failed", target, exc_info=True)
            _admission_failed(target=target, pending=pending, error=error)
            return Admission(target_status=status, admitted=[], error=error, host_connected=has_host)
        faults.crash_point("after_admission")
        now = timezone.now()
        queued_ids = [m.id for m in pending if m.state == MessageState.QUEUED]
        redelivered_ids = [m.id for m in pending if m.state != MessageState.QUEUED]
        # Only from queued: a folded entry may have marked one delivered meanwhile; never move it back.
        TeamMessage.objects.filter(pk__in=queued_ids, state=MessageState.QUEUED).update(
            state=MessageState.ACCEPTED, accepted_at=now, attempts=F("attempts") + 1, last_error=""
        )
        if redelivered_ids:
            TeamMessage.objects.filter(pk__in=redelivered_ids).update(attempts=F("attempts") + 1, last_error="")
        LeadLogRecord.objects.bulk_create(
            LeadLogRecord(
                team_id=target.team_id,
                kind=LogKind.MESSAGE_ACCEPTED,
                message_id=m.id,
                data={"target": target.name, "seq": m.seq, "target_status": status, "redelivery": m.id not in queued_ids},
            )
            for m in pending
        )
        events.dashboard_notify(target.team_id, "message", target=target.name, message_ids=[m.id for m in pending])
    return Admission(target_status=status, admitted=[m.id for m in pending], host_connected=has_host)


def target_retry(*, target: Member) -> Admission | None:
    """An operator's retry: admit (and push again) everything undelivered for ``target``;
    a member that failed to provision is asked for again, messages waiting or not."""
    admission = target_admit(target_id=target.pk, redeliver=True)
    if target.phase == Phase.FAILED:
        member_start(member_id=target.pk)
    return admission


def _admission_attempt(
    *, target: Member, status: str, has_host: bool | None, pending: list[TeamMessage], push: bool = True
) -> None:
    faults.inject("inspection")
    if status in (Status.RUNNING, Status.IDLE):
        faults.inject("admission")
        for message in pending if push else ():
            faults.inject("push")
            events.send_now(
                target.session_channel,  # read under the row lock a hello's takeover also takes
                {"type": "session.steer", "message": message_wire(message, target_name=target.name)},
                to_channel=True,
            )
    elif status == Status.RETIRED:
        raise faults.TemporaryDeliveryError(f"{target.name} is retired")
    elif not has_host:
        raise faults.TemporaryDeliveryError(f"{target.name} is {status} and no host is connected to resume it")
    elif not _start_is_fresh(target):
        _start_request(member=target, reason=_start_reason(status))


def _admission_failed(*, target: Member, pending: list[TeamMessage], error: str) -> None:
    """The messages stay queued; write down the attempt and what went wrong.

    A failure observation goes to the Lead log only when the reason changed, so
    a target that waits for a host does not grow the log on every sweep."""
    error = error[:2000]
    TeamMessage.objects.filter(pk__in=[m.id for m in pending]).update(attempts=F("attempts") + 1, last_error=error)
    LeadLogRecord.objects.bulk_create(
        LeadLogRecord(
            team_id=target.team_id,
            kind=LogKind.MESSAGE_FAILED,
            message_id=m.id,
            data={"target": target.name, "seq": m.seq, "error": error},
        )
        for m in pending
        if m.last_error != error
    )
    events.dashboard_notify(target.team_id, "message", target=target.name)


def message_send(*, sender: Member, target_name: str, content: str, reply_to: str = "") -> tuple[TeamMessage, Admission]:
    """Enqueue durably, then admit. Answers the message and what admission saw."""
    message = message_enqueue(sender=sender, target_name=target_name, content=content, reply_to=reply_to)
    return message_admit_enqueued(message=message)


def message_admit_enqueued(*, message: TeamMessage) -> tuple[TeamMessage, Admission]:
    """The second half of message_send, for callers that commit the enqueue themselves
    (an idempotent send commits its key with the snapshot)."""
    faults.crash_point("after_queued_commit")
    admission = target_admit(target_id=message.target_id)
    if message.id in admission.admitted:
        # What admission just wrote; a fold may since have made it delivered, and
        # the sender is told "accepted" either way.
        message.state = MessageState.ACCEPTED
    else:
        message.refresh_from_db(fields=["state", "attempts", "last_error", "accepted_at", "delivered_at"])
    return message, admission


def send_answer(message: TeamMessage, admission: Admission) -> dict:
    """The sender's answer to send_message: the message, its state and what admission saw."""
    return {
        "message_id": message.id,
        "status": "queued" if message.state == MessageState.QUEUED else "accepted",
        "thread_id": message.thread_id or message.id,
        "delivery": delivery_observation(message=message, admission=admission),
        "idempotent_replay": False,
    }


def delivery_observation(*, message: TeamMessage, admission: Admission) -> dict:
    """What admission saw, for the sender: the target's status, what happens next, and warnings.

    Observations, not promises: 'accepted' means the target's inbox took the
    message, never that the target took on the work it asks for."""
    has_host = admission.host_connected
    if has_host is None:
        has_host = host_connected(message.team_id)
    return observation(
        target=message.target.name,
        status=admission.target_status,
        state=message.state,
        has_host=has_host,
        error=admission.error,
    )


def observation(*, target: str, status: str, state: str, has_host: bool, error: str = "") -> dict:
    warnings: list[str] = []
    waiting = status in (Status.INACTIVE, Status.PROVISIONING, Status.FAILED)
    if state == MessageState.DELIVERED:
        expected = f"{target} already has the message in its history."
    elif waiting and not has_host:
        expected = f"The message waits in the durable mailbox until {target}'s session connects."
        warnings.append(
            f"{target} is {status} and no host is connected to resume it: the message waits for its session "
            "(or for a host to connect). It is stored; do not resend it."
        )
    elif error:
        expected = "The message stays queued; recovery admits it again, in order."
        warnings.append(
            f"Admission failed for now ({error}); the message is queued for recovery. "
            "It is stored; do not resend it."
        )
    elif status == Status.RUNNING:
        expected = f"{target} is in a turn: the message enters its history at its next step boundary."
    elif status == Status.IDLE:
        expected = f"{target} is idle: the message starts a turn."
    elif status == Status.PROVISIONING:
        expected = f"{target}'s session is being provisioned; it receives the message when the session connects."
    elif waiting:
        expected = f"{target} has no session: its host is resuming it, and it receives the message when it connects."
        if status == Status.FAILED:
            warnings.append(f"{target}'s last session start failed; the host was asked again.")
    else:
        expected = "The message stays queued for recovery."
    return {
        "target_status": str(status),
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "host_connected": bool(has_host),
        "expected": expected,
        "warnings": warnings,
    }


# --- 3. deliver --------------------------------------------------------------------------
def entry_record(*, member: Member, entry: dict) -> tuple[HistoryEntry | None, bool]:
    """Store one session history entry; fold a repeat. Returns (entry, created).

    A team message's entry marks the message delivered, only after the entry is durable.
    """
    source = entry.get("source") or {}
    message_id = None
    if entry["kind"] == "user_message" and source.get("kind") == "team-message":
        message_id = source.get("message_id")
        if not TeamMessage.objects.filter(pk=message_id, target=member).exists():
            raise TeamError(ErrorCode.NOT_FOUND, f"No team message {message_id!r} was addressed to you.")
    prompt_id = entry.get("prompt_id") if entry["kind"] == "prompt" else None
    created = True
    row = None
    try:
        with transaction.atomic():
            row = HistoryEntry.objects.create(
                member=member,
                entry_id=entry["id"],
                kind=entry["kind"],
                message_id=message_id,
                prompt_id=prompt_id,
                data=entry,
            )
            if not message_id:
                events.dashboard_notify(member.team_id, "entry", member=member.name)
    except IntegrityError:
        created = False  # source folding: this entry (or this message) is already in the history
    faults.crash_point("after_entry")
    if message_id:
        marked = False
        try:
            marked = message_mark_delivered(message_id=message_id)
        except faults.TemporaryDeliveryError:
            # The entry is durable; recovery (reconcile, or the session's next
            # report of it) writes the delivered record.
            log.warning("delivered record for %s deferred to recovery", message_id)
        if created and not marked:  # otherwise the delivered record's doorbell tells the dashboards
            events.dashboard_notify(member.team_id, "entry", member=member.name)
    return row, created


def message_mark_delivered(*, message_id: str) -> bool:
    """Write `delivered` once; the history must already hold the message."""
    faults.inject("delivered_record")
    with transaction.atomic():
        message = (
            TeamMessage.objects.select_for_update(no_key=True, of=("self",)).select_related("target").get(pk=message_id)
        )
        if message.state == MessageState.DELIVERED:
            return False
        if not HistoryEntry.objects.filter(member_id=message.target_id, message_id=message_id).exists():
            return False
        now = timezone.now()
        message.state = MessageState.DELIVERED
        message.delivered_at = now
        message.accepted_at = message.accepted_at or now
        message.save(update_fields=["state", "delivered_at", "accepted_at"])
        LeadLogRecord.objects.create(
            team_id=message.team_id,
            kind=LogKind.MESSAGE_DELIVERED,
            message=message,
            data={"target": message.target.name, "seq": message.seq},
        )
        events.dashboard_notify(message.team_id, "message", message_id=message.id, target=message.target.name)
    return True


# --- 4. recover ---------------------------------------------------------------------------
def undelivered_for(*, member: Member) -> list[TeamMessage]:
    return selectors.pending_of(target=member)


def messages_reconcile() -> int:
    """Mark delivered every message whose entry is in its target's history (a crash between the two)."""
    held = HistoryEntry.objects.filter(member_id=OuterRef("target_id"), message_id=OuterRef("pk"))
    ids = list(
        TeamMessage.objects.filter(state__in=_PENDING)
        .filter(Exists(held))
        .order_by("state", "queued_at")  # walks the (state, queued_at) index; see recovery_sweep
        .values_list("pk", flat=True)[:500]
    )
    return sum(message_mark_delivered(message_id=i) for i in ids)


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
        TeamMessage.objects.filter(state=MessageState.ACCEPTED, accepted_at__lt=stale_before)
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


def recovery_sweep() -> dict:
    """One pass of recovery: reconcile, admit what is queued, re-push what is stale."""
    reconciled = messages_reconcile()
    stale_before = timezone.now() - timedelta(seconds=settings.STEERBOARD["REDELIVER_AFTER"])
    # Ordered by queued_at, without DISTINCT: both databases then walk the (state,
    # queued_at) index over the pending few. With DISTINCT, SQLite scanned the whole
    # table through another index (130 ms per query at a million stored messages,
    # on the thread every websocket of the process shares).
    queued_targets = set(
        TeamMessage.objects.filter(state=MessageState.QUEUED).order_by("queued_at").values_list("target_id", flat=True)[
            :5000
        ]
    )
    stale_targets = _redelivery_due(stale_before)
    admitted = 0
    for target_id in sorted(queued_targets | stale_targets):
        faults.crash_point("mid_recovery")
        result = target_admit(target_id=target_id, redeliver=target_id in stale_targets, skip_locked=True)
        admitted += len(result.admitted) if result else 0
    provisioned = members_start_pending()
    resumed = sum(member_start(member_id=m) for m in selectors.members_awaiting_prompt())
    return {"reconciled": reconciled, "admitted": admitted, "provisioned": provisioned, "resumed_for_prompts": resumed}


def members_start_pending(*, team_id: int | None = None) -> int:
    """Ask connected hosts to start members still provisioning whose start went stale."""
    started = 0
    with_host = HostPresence.objects.values_list("team_id", flat=True)
    qs = Member.objects.filter(phase=Phase.PROVISIONING, session_state=SessionState.INACTIVE, team_id__in=with_host)
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    for member in qs[:100]:
        with transaction.atomic():
            locked = Member.objects.select_for_update(skip_locked=True, no_key=True).filter(pk=member.pk).first()
            if locked is None or _start_is_fresh(locked):
                continue
            try:
                _start_request(member=locked, reason="provision")
                started += 1
            except Exception:
                log.warning("could not ask a host to provision %s", locked, exc_info=True)
    return started


# --- the hot path: the same transitions as raw SQL, group-committed by the writer -------------
#
# ``message_send`` + ``target_admit`` and ``entry_record`` + ``message_mark_delivered``
# above are the reference; the jobs below make the same rows in fewer statements
# (tests/mailbox/test_hot_path.py compares the two). A send to a running or idle
# target with nothing queued before it is enqueued *and* admitted in one
# transaction (its `queued` and `accepted` records together) and pushed after the
# commit; any other send is enqueued here and admitted by ``target_admit`` after
# the commit, exactly as before. An entry and its `delivered` record commit together.
_ADMISSION_FAULTS = ("inspection", "admission", "push")


def hosts_exists(member: str, hosts: str) -> str:
    return f"EXISTS (SELECT 1 FROM {hosts} WHERE team_id = {member}.team_id)"


class _Sql:
    """The hot path's statements for one database vendor."""

    def __init__(self, vendor: str):
        json_value = "CAST(%s AS jsonb)" if vendor == "postgresql" else "%s"
        member, message = Member._meta.db_table, TeamMessage._meta.db_table
        history, log_table = HistoryEntry._meta.db_table, LeadLogRecord._meta.db_table
        hosts = HostPresence._meta.db_table
        from mailbox.models import HumanPrompt

        def pending(state: str) -> str:
            # One index range per state ((target, state, seq)): the pending few, never the inbox.
            return f"(SELECT COUNT(*) FROM {message} WHERE target_id = {member}.id AND state = '{state}')"

        # Takes the target's row lock (as select_for_update(no_key=True) does), hands out
        # its next seq and refuses a full mailbox, in one statement.
        self.target_claim = (
            f"UPDATE {member} SET next_seq = next_seq + 1 "
            f"WHERE team_id = %s AND name = %s AND phase NOT IN ('retired', 'failed') "
            f"AND {pending('queued')} + {pending('accepted')} < %s "
            f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, {pending('queued')}, "
            f"{hosts_exists(member, hosts)}"
        )
        self.target_refusal = f"SELECT id, phase FROM {member} WHERE team_id = %s AND name = %s"
        self.target_pending = (
            f"SELECT COUNT(*) FROM {message} WHERE target_id = %s AND state IN ('queued', 'accepted')"
        )
        self.reply_thread = (
            f"SELECT id, thread_id FROM {message} WHERE id = %s AND team_id = %s AND target_id = %s"
        )
        self.message_insert = (
            f"INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, "
            f"state, attempts, last_error, created_at, queued_at, accepted_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, '', %s, %s, %s)"
        )
        self.entry_insert = (
            f"INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
            f"VALUES (%s, %s, %s, %s, %s, {json_value}, %s) ON CONFLICT DO NOTHING RETURNING id"
        )
        self.entry_undo = f"DELETE FROM {history} WHERE id = %s"
        # Delivered only while the history holds the message (the entry may have folded
        # on another entry's id) and only once; no existence checks before it.
        self.mark_delivered = (
            f"UPDATE {message} SET state = 'delivered', delivered_at = %s, accepted_at = COALESCE(accepted_at, %s) "
            f"WHERE id = %s AND target_id = %s AND state <> 'delivered' "
            f"AND EXISTS (SELECT 1 FROM {history} WHERE member_id = %s AND message_id = %s) "
            f"RETURNING seq"
        )
        self.message_is_mine = f"SELECT 1 FROM {message} WHERE id = %s AND target_id = %s"
        self.prompt_started = (
            f"UPDATE {HumanPrompt._meta.db_table} SET state = 'started', started_at = %s "
            f"WHERE id = %s AND target_id = %s AND state = 'queued'"
        )
        self.log_insert_head = f"INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) VALUES "
        self.log_row = f"(%s, %s, %s, {json_value}, %s)"
        if vendor != "postgresql":
            self.send_piped = self.entry_piped = None
            return
        # PostgreSQL runs each job as one statement (one round trip): the steps above,
        # with their Lead-log records, joined by data-modifying WITH clauses (which
        # SQLite does not have). Needing no other statement's answer, a batch's
        # statements go out in one pipeline (jobs_piped).
        pushable = "phase IN ('active', 'provisioning') AND session_state IN ('running', 'idle')"
        text = "CAST(%(target)s AS text)"
        queued_none = f"NOT EXISTS (SELECT 1 FROM {message} WHERE target_id = {member}.id AND state = 'queued')"
        pending_all = (
            f"(SELECT COUNT(*) FROM {message} WHERE target_id = {member}.id AND state IN ('queued', 'accepted'))"
        )
        self.send_piped = (
            f"WITH t AS (UPDATE {member} SET next_seq = next_seq + 1 "
            f"WHERE team_id = %(team)s AND name = %(target)s AND phase NOT IN ('retired', 'failed') "
            f"AND {pending_all} < %(limit)s "
            f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, "
            f"{hosts_exists(member, hosts)} AS has_host, ({pushable} AND {queued_none} AND %(may)s) AS admit), "
            f"m AS (INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, "
            f"state, attempts, last_error, created_at, queued_at, accepted_at) "
            f"SELECT %(id)s, %(team)s, %(sender)s, t.id, %(content)s, t.seq, %(thread)s, %(reply_to)s, "
            f"CASE WHEN t.admit THEN 'accepted' ELSE 'queued' END, CASE WHEN t.admit THEN 1 ELSE 0 END, '', "
            f"%(now)s, %(now)s, CASE WHEN t.admit THEN %(now)s ELSE NULL END FROM t), "
            f"l AS (INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) "
            f"SELECT %(team)s, '{LogKind.MESSAGE_QUEUED}', %(id)s, jsonb_build_object('sender', "
            f"CAST(%(sender_name)s AS text), 'target', {text}, 'seq', t.seq), %(now)s FROM t "
            f"UNION ALL SELECT %(team)s, '{LogKind.MESSAGE_ACCEPTED}', %(id)s, jsonb_build_object('target', {text}, "
            f"'seq', t.seq, 'target_status', t.session_state, 'redelivery', false), %(now)s FROM t WHERE t.admit) "
            f"SELECT t.id, t.seq, t.phase, t.session_state, t.session_channel, t.has_host, t.admit FROM t"
        )
        self.entry_piped = (
            f"WITH h AS (INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
            f"VALUES (%(member)s, %(entry_id)s, %(kind)s, %(message)s, %(prompt)s, CAST(%(data)s AS jsonb), %(now)s) "
            f"ON CONFLICT DO NOTHING RETURNING id), "
            f"d AS (UPDATE {message} SET state = 'delivered', delivered_at = %(now)s, "
            f"accepted_at = COALESCE(accepted_at, %(now)s) "
            f"WHERE %(mark)s AND id = %(message)s AND target_id = %(member)s AND state <> 'delivered' "
            f"AND (EXISTS (SELECT 1 FROM h) "
            f"OR EXISTS (SELECT 1 FROM {history} WHERE member_id = %(member)s AND message_id = %(message)s)) "
            f"RETURNING seq), "
            f"l AS (INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) "
            f"SELECT %(team)s, '{LogKind.MESSAGE_DELIVERED}', %(message)s, jsonb_build_object('target', "
            f"CAST(%(name)s AS text), 'seq', d.seq), %(now)s FROM d ON CONFLICT DO NOTHING), "
            f"p AS (UPDATE {HumanPrompt._meta.db_table} SET state = 'started', started_at = %(now)s "
            f"WHERE id = %(prompt)s AND target_id = %(member)s AND state = 'queued') "
            f"SELECT (SELECT id FROM h), (SELECT seq FROM d), "
            f"EXISTS (SELECT 1 FROM {message} WHERE id = %(message)s AND target_id = %(member)s)"
        )


_sql_by_vendor: dict[str, _Sql] = {}


def _sql(db=None) -> _Sql:
    vendor = (db or connection).vendor
    found = _sql_by_vendor.get(vendor)
    if found is None:
        found = _Sql(vendor)
        if vendor == "sqlite":  # the raw sqlite3 cursor's placeholder
            for name, statement in vars(found).items():
                if statement is not None:
                    setattr(found, name, statement.replace("%s", "?"))
        _sql_by_vendor[vendor] = found
    return found


def _prepared_statements_on(raw) -> None:
    """Let the writer's connection keep its statements prepared. Django turns psycopg's
    prepared statements off (prepare_threshold None), and then ``prepare=True`` is
    ignored too: PostgreSQL planned each of the hot path's statements on every call,
    about 60 % of its CPU per message. Only the writer's own connection is changed.
    (Behind PgBouncer in transaction pooling this needs its ``max_prepared_statements``.)"""
    if raw.prepare_threshold is None:
        raw.prepare_threshold = 5


class _HotCursor:
    """The driver's own cursor on Django's connection (inside Django's transaction),
    without Django's cursor wrappers: on PostgreSQL it binds parameters on the
    server and prepares the fixed statements (Django's cursor quotes every
    parameter into the SQL text in Python, a tenth of the hot path's time)."""

    def __init__(self, db):
        self.db = db
        db.ensure_connection()
        raw = db.connection
        self.postgres = db.vendor == "postgresql"
        if self.postgres:
            import psycopg

            _prepared_statements_on(raw)
            self.cursor = psycopg.Cursor(raw)
        else:
            self.cursor = raw.cursor()
        self.counting = sqlcount.installed()

    def execute(self, statement: str, params, *, prepare: bool = True) -> None:
        if self.counting:
            sqlcount.statement_run(in_transaction=True)
        try:
            if self.postgres:
                self.cursor.execute(statement, params, prepare=prepare)
            else:
                self.cursor.execute(statement, params)
        except Exception:
            self.db.errors_occurred = True  # the writer then closes this connection (mailbox/db.py)
            raise

    def fetchone(self):
        return self.cursor.fetchone()

    def __enter__(self) -> "_HotCursor":
        return self

    def __exit__(self, *exc) -> None:
        self.cursor.close()


_hot_cursor = _HotCursor


@contextlib.contextmanager
def hot_transaction(batch: "_writer.Batch"):
    """A writer batch's transaction: BEGIN and COMMIT on the driver's connection.

    The jobs run raw statements only, so Django's atomic() (savepoint and
    on-commit bookkeeping, autocommit switching) would add its cost and nothing
    else. Django's connection stays in autocommit between batches, as outside
    any atomic block; a failure rolls back, and marks the connection so the
    writer closes it if it is broken (mailbox/db.py)."""
    db = batch.db
    db.ensure_connection()
    raw = db.connection
    try:
        if db.vendor == "postgresql":
            # BEGIN goes out with the batch's statements, COMMIT on its own:
            # two round trips a batch, whatever its size.
            with raw.pipeline():
                raw.execute("BEGIN")
                yield
                raw.execute("COMMIT")
        else:
            raw.execute("BEGIN IMMEDIATE")
            yield
            raw.execute("COMMIT")
    except BaseException:
        try:
            raw.execute("ROLLBACK")
        except Exception:
            pass
        db.errors_occurred = True
        raise
    if sqlcount.installed():
        sqlcount.commit_run()


def jobs_piped(jobs: list, batch: "_writer.Batch") -> list:
    """PostgreSQL: send the statements of the jobs that have one in one pipeline
    (one round trip for the batch instead of one per statement), then hand each
    job its row. Answers the jobs that still need to run one by one."""
    statements = [(job, job.piped(batch)) for job in jobs] if _sql(batch.db).send_piped else []
    piped = [(job, st) for job, st in statements if st is not None]
    if not piped:
        return jobs
    import psycopg

    batch.db.ensure_connection()
    raw = batch.db.connection
    _prepared_statements_on(raw)
    counting = sqlcount.installed()
    cursors = []
    try:
        with raw.pipeline():
            for job, (statement, params) in piped:
                cursor = psycopg.Cursor(raw)
                cursor.execute(statement, params, prepare=True)
                cursors.append((job, cursor))
                if counting:
                    sqlcount.statement_run(in_transaction=True)
    except Exception:
        batch.db.errors_occurred = True
        raise
    for job, cursor in cursors:
        job.error = None
        try:
            job.piped_result(cursor.fetchone(), batch)
        except TeamError as exc:  # a refusal wrote nothing (or undid its entry)
            job.error = exc
        finally:
            cursor.close()
    done = {id(job) for job, _ in piped}
    return [job for job in jobs if id(job) not in done]


def log_rows_flush(batch: "_writer.Batch") -> None:
    """A batch's Lead-log records, in the order its jobs appended them, in one statement."""
    if not batch.log_rows:
        return
    sql = _sql(batch.db)
    now = batch.now_db
    params: list = []
    for team_id, kind, message_id, data in batch.log_rows:
        params += [team_id, kind, message_id, data, now]
    statement = sql.log_insert_head + ", ".join([sql.log_row] * len(batch.log_rows)) + " ON CONFLICT DO NOTHING"
    with _hot_cursor(batch.db) as cursor:
        cursor.execute(statement, params, prepare=False)


def _refuse_target(cursor, *, team_id: int, target_name: str) -> None:
    sql = _sql(cursor.db)
    cursor.execute(sql.target_refusal, [team_id, target_name])
    row = cursor.fetchone()
    if row is None:
        raise TeamError(
            ErrorCode.TEAM_UNKNOWN_TARGET,
            f"No member named {target_name!r} on this team; list_agents shows the roster.",
            persisted=False,
        )
    _refuse_phase(Member(name=target_name, phase=row[1]))
    cursor.execute(sql.target_pending, [row[0]])
    pending = cursor.fetchone()[0]
    raise TeamError(
        ErrorCode.TEAM_MAILBOX_FULL,
        f"{target_name} already has {pending} undelivered messages; wait for it to catch up (wait_agent).",
        persisted=False,
    )


class SendJob(_writer.Job):
    """Enqueue (and, for a running or idle target with nothing queued, admit) one message."""

    def __init__(self, *, sender: Member, target_name: str, content: str, reply_to: str = ""):
        super().__init__()
        message_validate(sender=sender, target_name=target_name, content=content)
        self.sender = sender
        self.target_name = target_name
        self.content = content
        self.reply_to = reply_to
        self.message_id = message_id_new()
        self.may_admit = not faults.armed(_ADMISSION_FAULTS)
        self.admitted = False
        self.lock_order = (1, sender.team_id, target_name)

    def execute(self, batch) -> None:
        sender, sql = self.sender, _sql(batch.db)
        now = batch.now_db
        with _hot_cursor(batch.db) as cursor:
            self.thread_id = ""
            if self.reply_to:
                cursor.execute(sql.reply_thread, [self.reply_to, sender.team_id, sender.pk])
                row = cursor.fetchone()
                if row is None:
                    raise TeamError(
                        ErrorCode.NOT_FOUND, f"You received no message {self.reply_to!r} to reply to.", persisted=False
                    )
                self.thread_id = row[1] or row[0]
            if sql.send_piped:  # PostgreSQL: the same one statement a pipelined batch sends
                cursor.execute(sql.send_piped, self._piped_params(batch))
                self.piped_result(cursor.fetchone(), batch)
                return
            claim = [sender.team_id, self.target_name, _limit("MAX_PENDING_PER_TARGET")]
            cursor.execute(sql.target_claim, claim)
            row = cursor.fetchone()
            if row is None:
                _refuse_target(cursor, team_id=sender.team_id, target_name=self.target_name)
            self.target_id, self.seq, phase, session_state, self.channel, queued_before, has_host = row
            self.target_status = status_of(phase, session_state)
            self.has_host = bool(has_host)
            # Admission here only when it is a push: every earlier message of this target
            # is already accepted (none queued), so seq order holds.
            self.admitted = (
                self.may_admit and self.target_status in (Status.RUNNING, Status.IDLE) and not queued_before
            )
            cursor.execute(
                sql.message_insert,
                [
                    self.message_id, sender.team_id, sender.pk, self.target_id, self.content, self.seq,
                    self.thread_id, self.reply_to,
                    MessageState.ACCEPTED if self.admitted else MessageState.QUEUED,
                    1 if self.admitted else 0, now, now, now if self.admitted else None,
                ],
            )
        self._log(batch)

    def _log(self, batch) -> None:
        sender = self.sender
        self.created_at = batch.now
        batch.log(
            team_id=sender.team_id, kind=LogKind.MESSAGE_QUEUED, message_id=self.message_id,
            data=json.dumps({"sender": sender.name, "target": self.target_name, "seq": self.seq}),
        )
        if self.admitted:
            batch.log(
                team_id=sender.team_id, kind=LogKind.MESSAGE_ACCEPTED, message_id=self.message_id,
                data=json.dumps(
                    {"target": self.target_name, "seq": self.seq, "target_status": self.target_status,
                     "redelivery": False}
                ),
            )

    def piped(self, batch) -> tuple[str, dict] | None:
        """The job as one statement that needs no other's answer (PostgreSQL), or None
        (a reply first looks up its thread: ``execute`` runs it)."""
        sql = _sql(batch.db)
        if not sql.send_piped or self.reply_to:
            return None
        self.thread_id = ""
        return sql.send_piped, self._piped_params(batch)

    def _piped_params(self, batch) -> dict:
        return {
            "team": self.sender.team_id, "target": self.target_name, "limit": _limit("MAX_PENDING_PER_TARGET"),
            "may": self.may_admit, "id": self.message_id, "sender": self.sender.pk, "sender_name": self.sender.name,
            "content": self.content, "thread": self.thread_id, "reply_to": self.reply_to, "now": batch.now,
        }

    def piped_result(self, row, batch) -> None:
        if row is None:
            with _hot_cursor(batch.db) as cursor:
                _refuse_target(cursor, team_id=self.sender.team_id, target_name=self.target_name)
        self.target_id, self.seq, phase, session_state, self.channel, has_host, self.admitted = row
        self.target_status = status_of(phase, session_state)
        self.has_host = bool(has_host)
        self.created_at = batch.now

    def committed(self) -> None:
        if self.admitted:  # otherwise message_admit_enqueued reaches the point, before its admission
            faults.crash_point("after_queued_commit")

    def wire(self) -> dict:
        return {
            "id": self.message_id,
            "sender": self.sender.name,
            "target": self.target_name,
            "content": self.content,
            "seq": self.seq,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
            "thread_id": self.thread_id or self.message_id,
            "kind": MessageKind.MESSAGE,
        }

    def finish(self) -> None:
        if self.admitted:
            events.session_push(self.channel, {"type": "session.steer", "message": self.wire()})
            faults.crash_point("after_admission")
        events.dashboard_ring(self.sender.team_id, {"type": "team.changed", "kind": "message", "target": self.target_name})

    def message(self) -> TeamMessage:
        """The stored row, as message_enqueue returns it."""
        message = TeamMessage(
            id=self.message_id, team_id=self.sender.team_id, sender=self.sender, content=self.content, seq=self.seq,
            thread_id=self.thread_id, reply_to=self.reply_to,
            state=MessageState.ACCEPTED if self.admitted else MessageState.QUEUED,
            attempts=1 if self.admitted else 0, created_at=self.created_at, queued_at=self.created_at,
            accepted_at=self.created_at if self.admitted else None,
        )
        message.target = Member(id=self.target_id, team_id=self.sender.team_id, name=self.target_name)
        message._state.adding = False
        message._state.db = "default"
        return message

    def answer(self) -> dict:
        """The sender's answer for a send admitted in the writer (no database)."""
        return {
            "message_id": self.message_id,
            "status": "accepted",
            "thread_id": self.thread_id or self.message_id,
            "delivery": observation(
                target=self.target_name, status=self.target_status, state=MessageState.ACCEPTED,
                has_host=self.has_host,
            ),
            "idempotent_replay": False,
        }


class EntryJob(_writer.Job):
    """Store one history entry (a repeat folds); a team message's entry marks it delivered in the same commit."""

    def __init__(self, *, member: Member, entry: dict):
        super().__init__()
        self.member = member
        self.entry = entry
        source = entry.get("source") or {}
        self.message_id = (
            source.get("message_id") if entry["kind"] == "user_message" and source.get("kind") == "team-message" else None
        )
        self.prompt_id = entry.get("prompt_id") if entry["kind"] == "prompt" else None
        self.data = json.dumps(entry)
        self.delivered = False

    def execute(self, batch) -> None:
        sql = _sql(batch.db)
        if sql.entry_piped:  # PostgreSQL: the same one statement a pipelined batch sends
            statement, params = self.piped(batch)
            with _hot_cursor(batch.db) as cursor:
                cursor.execute(statement, params)
                self.piped_result(cursor.fetchone(), batch)
            return
        member, now = self.member, batch.now_db
        self.delivered = False
        mark = bool(self.message_id) and not self._delivered_deferred()
        with _hot_cursor(batch.db) as cursor:
            cursor.execute(
                sql.entry_insert,
                [member.pk, self.entry["id"], self.entry["kind"], self.message_id, self.prompt_id, self.data, now],
            )
            found = cursor.fetchone()
            inserted, seq = (found[0] if found else None), None
            if mark:
                cursor.execute(sql.mark_delivered, [now, now, self.message_id, member.pk, member.pk, self.message_id])
                marked = cursor.fetchone()
                seq = marked[0] if marked else None
            if seq is not None:
                self.delivered = True
                batch.log(
                    team_id=member.team_id, kind=LogKind.MESSAGE_DELIVERED, message_id=self.message_id,
                    data=json.dumps({"target": member.name, "seq": seq}),
                )
            elif self.message_id:  # folded, deferred, or not this member's message at all
                cursor.execute(sql.message_is_mine, [self.message_id, member.pk])
                if cursor.fetchone() is None:
                    self._not_mine(cursor, inserted)
            if self.prompt_id:
                cursor.execute(sql.prompt_started, [now, self.prompt_id, member.pk])
        self.result = inserted is not None

    def piped(self, batch) -> tuple[str, dict] | None:
        sql = _sql(batch.db)
        if not sql.entry_piped:
            return None
        self.delivered = False
        member = self.member
        return sql.entry_piped, {
            "member": member.pk, "entry_id": self.entry["id"], "kind": self.entry["kind"], "message": self.message_id,
            "prompt": self.prompt_id, "data": self.data, "now": batch.now, "team": member.team_id,
            "name": member.name, "mark": bool(self.message_id) and not self._delivered_deferred(),
        }

    def piped_result(self, row, batch) -> None:
        inserted, seq, mine = row
        self.delivered = seq is not None
        if self.message_id and not mine:
            with _hot_cursor(batch.db) as cursor:
                self._not_mine(cursor, inserted)
        self.result = inserted is not None

    def _not_mine(self, cursor, inserted: int | None) -> None:
        """The entry names a message never addressed to this member: store nothing, refuse."""
        if inserted is not None:
            cursor.execute(_sql(cursor.db).entry_undo, [inserted])
        raise TeamError(ErrorCode.NOT_FOUND, f"No team message {self.message_id!r} was addressed to you.")

    def _delivered_deferred(self) -> bool:
        try:
            faults.inject("delivered_record")
        except faults.TemporaryDeliveryError:
            # The entry is durable; recovery (reconcile, or the session's next report) writes delivered.
            log.warning("delivered record for %s deferred to recovery", self.message_id)
            return True
        return False

    def committed(self) -> None:
        faults.crash_point("after_entry")

    def finish(self) -> None:
        team_id, name = self.member.team_id, self.member.name
        if self.delivered:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "message", "target": name})
        elif self.result:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "entry", "member": name})
        if self.prompt_id:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "prompt", "member": name})


async def message_send_fast(*, sender: Member, target_name: str, content: str, reply_to: str = "") -> dict:
    """send_message through the writer; answers the sender's result (tools.py's shape)."""
    from mailbox.db import database_sync_to_async, writer

    job = SendJob(sender=sender, target_name=target_name, content=content, reply_to=reply_to)
    await writer().run(job)
    if job.admitted:
        return job.answer()
    # Anything but a plain push (a resume, a target with messages queued before this
    # one, a test's armed fault) is admitted by target_admit, as before.
    return await database_sync_to_async(_admit_and_answer)(job.message())


def _admit_and_answer(message: TeamMessage) -> dict:
    return send_answer(*message_admit_enqueued(message=message))


def entry_record_submit(*, member: Member, entry: dict) -> asyncio.Future:
    """entry_record through the writer: a future of whether the entry was new (False: folded).
    Raises TeamError at once, storing nothing, when the member's history quota refuses
    the entry (mailbox/quota.py: in memory, no SQL)."""
    from mailbox import quota
    from mailbox.db import writer

    job = EntryJob(member=member, entry=entry)
    quota.entry_charge(member_id=member.pk, size=len(job.data))
    return writer().run(job)
