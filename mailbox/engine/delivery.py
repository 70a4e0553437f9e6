"""The delivery state machine of team messages. Everything else calls this module.

A message moves only forward:

=============  ===========================================  ============  ==========================
from           event                                        to            Lead log record
=============  ===========================================  ============  ==========================
(none)         send_message commits the snapshot            queued        team/message/queued
(none)         ... and finds it must wait: the target       queued        team/message/queued and
               without a session and a host, or the         (attempts 1,  team/message/failed
               team's budget used up (in the same commit)   last_error)   (waiting)
queued         admission: target running or idle, steer     accepted      team/message/accepted
               pushed to its current session's channel
queued         admission: target inactive, a host is        accepted      team/message/accepted
               connected and asked to resume it
queued         temporary inspection/resume/admission        queued        team/message/failed
               failure (channel layer down, ...)            (attempts+1,  (an observation)
                                                            failures+1)
queued         admission finds the target waiting (no       queued        team/message/failed
               session and no host, or retired)             (no count)    (when the reason changed)
queued or      the target's session reports the history     delivered     team/message/delivered
accepted       entry that carries this message id (an MCP
               session's inbox read is recorded as that
               entry by mailbox/members/inbox.py: its context holds
               the message once the read is answered)
accepted       recovery: undelivered for REDELIVER_AFTER,   accepted      team/message/accepted
               or a session says hello: pushed again        (repushes+1)  (redelivery: true)
queued or      an operator's retry (before the admission    unchanged     team/message/retried
accepted       it runs)
queued or      an operator cancels it: never pushed or      cancelled     team/message/cancelled
accepted       replayed again, an entry for it records      (final)
               nothing
=============  ===========================================  ============  ==========================

Who writes each transition (docs/delivery.md, "Who writes what"): the send
(queued, and accepted in the same commit when the target is running or idle) and
the entry that delivers are the process's writer's jobs, mailbox/engine/hot_path.py, the
only code that stores a message or marks it delivered; their SQL is built from
the models' states and this module's refusals. Admission, failures, waits,
redelivery and retries are the functions below. No other module changes a
message's state.

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
import contextlib
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from mailbox import selectors
from mailbox.engine import budget, lead_log, starts
from mailbox.engine.lead_log import accepted_record, cancelled_record, failed_record, retried_record
from mailbox.models import PENDING_STATES, TARGET_SESSIONLESS_STATUSES, LogKind, MessageKind, MessageState, TeamMessage
from mailbox.plumbing import events, faults, wire
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, Status

log = logging.getLogger(__name__)


def steer_of(message: TeamMessage, *, target_name: str) -> dict:
    """The message as a ``steer`` frame carries it (docs/protocol.md); a person's answer to an
    ask also names the ask, the decision, the answer and who gave it (mailbox/members/asks.py); a
    message sent in a trace, that trace's context (mailbox/plumbing/tracing.py)."""
    steer = wire.steer_message(
        id=message.id, sender=message.sender.name, target=target_name, content=message.content, seq=message.seq,
        created_at=message.created_at, thread_id=message.thread_id, kind=message.kind,
        trace=(message.traceparent, message.tracestate),
    )
    if message.kind == MessageKind.HUMAN_ANSWER:
        steer.update(selectors.human_answer_of(message.id))
    return steer


# --- 1. a send: what is refused (mailbox/engine/hot_path.py stores it) --------------------------
def message_validate(*, sender: Member, target_name: str, content: str) -> None:
    """The checks of a send that need no database."""
    if len(content.encode("utf-8")) > settings.STEERBOARD["MAX_MESSAGE_BYTES"]:
        raise TeamError(
            ErrorCode.TEAM_MESSAGE_TOO_LARGE,
            f"A message may hold at most {settings.STEERBOARD['MAX_MESSAGE_BYTES']} bytes of UTF-8; shorten it or link a record.",
            persisted=False,
        )
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "A message needs some content.", persisted=False)
    if target_name == sender.name:
        raise TeamError(ErrorCode.TEAM_SELF_MESSAGE, "A member cannot message itself.", persisted=False)


def unknown_target(target_name: str) -> TeamError:
    return TeamError(
        ErrorCode.TEAM_UNKNOWN_TARGET,
        f"No member named {target_name!r} on this team; list_agents shows the roster.",
        persisted=False,
    )


def mailbox_full(target_name: str, pending: int) -> TeamError:
    return TeamError(
        ErrorCode.TEAM_MAILBOX_FULL,
        f"{target_name} already has {pending} undelivered messages; wait for it to catch up (wait_agent).",
        persisted=False,
    )


def not_received(reply_to: str) -> TeamError:
    return TeamError(ErrorCode.NOT_FOUND, f"You received no message {reply_to!r} to reply to.", persisted=False)


def not_addressed(message_id: str) -> TeamError:
    """An entry names a team message that was never addressed to its member."""
    return TeamError(ErrorCode.NOT_FOUND, f"No team message {message_id!r} was addressed to you.")


def spawn_prompt_validate(prompt: str) -> None:
    if len(prompt.encode("utf-8")) > settings.STEERBOARD["MAX_MESSAGE_BYTES"]:
        raise TeamError(
            ErrorCode.TEAM_MESSAGE_TOO_LARGE,
            f"A spawn prompt is delivered as a message: at most {settings.STEERBOARD['MAX_MESSAGE_BYTES']} bytes of UTF-8.",
        )


def refuse_phase(target: Member) -> None:
    """A retired or failed member takes no messages (nothing is stored): raises the refusal
    a send gets (mailbox/engine/hot_path.py, whose statements refuse the models'
    TARGET_REFUSING_PHASES)."""
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


# --- 2. admission -----------------------------------------------------------------------
@dataclass
class Admission:
    target_status: str
    admitted: list[str]
    error: str = ""
    # Looked up only for a target without a session (None: not looked up); the
    # sender's answer asks when it needs to (delivery_observation).
    host_connected: bool | None = None
    # Why it waits, as a code, when a sender should know it (TEAM_BUDGET_EXHAUSTED).
    code: str = ""


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
        states = list(PENDING_STATES) if redeliver else [MessageState.QUEUED]
        pending = selectors.pending_of(target=target, states=states)
        status = target.status
        # A running or idle target only gets pushes: it needs no host, and nothing
        # to undo if a push fails. A resume writes (a token, the start request), so
        # it runs in a savepoint: a failed attempt leaves no half-written row behind.
        pushes_only = status in (Status.RUNNING, Status.IDLE)
        has_host = None if pushes_only else starts.team_has_host(target.team_id)
        if not pending:
            return Admission(target_status=status, admitted=[], host_connected=has_host)
        try:
            with contextlib.nullcontext() if pushes_only else transaction.atomic():
                _admission_attempt(target=target, status=status, has_host=has_host, pending=pending, push=push)
        except Exception as exc:  # temporary: inspection, resume or admission failed
            error = str(exc) or exc.__class__.__name__
            if not isinstance(exc, faults.TemporaryDeliveryError):
                log.warning("admission to %s failed", target, exc_info=True)
            _admission_failed(target=target, pending=pending, error=error, waiting=isinstance(exc, TargetWaiting))
            return Admission(
                target_status=status, admitted=[], error=error, host_connected=has_host, code=getattr(exc, "code", "")
            )
        faults.crash_point("after_admission")
        now = timezone.now()
        queued_ids = [m.id for m in pending if m.state == MessageState.QUEUED]
        redelivered_ids = [m.id for m in pending if m.state != MessageState.QUEUED]
        # Only from queued: a folded entry may have marked one delivered meanwhile; never move it back.
        TeamMessage.objects.filter(pk__in=queued_ids, state=MessageState.QUEUED).update(
            state=MessageState.ACCEPTED, accepted_at=now, attempts=F("attempts") + 1, last_error=""
        )
        if redelivered_ids:
            TeamMessage.objects.filter(pk__in=redelivered_ids).update(
                attempts=F("attempts") + 1, repushes=F("repushes") + 1, last_error=""
            )
        lead_log.messages_logged(
            team_id=target.team_id,
            kind=LogKind.MESSAGE_ACCEPTED,
            records=(
                (m.id, accepted_record(
                    target=target.name, seq=m.seq, target_status=status, redelivery=m.id not in queued_ids
                ))
                for m in pending
            ),
            target=target.name,
            first_accepted=tuple(m.queued_at for m in pending if m.state == MessageState.QUEUED),
        )
    return Admission(target_status=status, admitted=[m.id for m in pending], host_connected=has_host)


def retry_logged(*, messages: list[TeamMessage], by: str) -> None:
    """An operator's retry of these undelivered messages, written down before the admission it runs
    (a `retried` record each, in the messages' traces)."""
    by_target: dict[int, list[TeamMessage]] = {}
    for message in messages:
        by_target.setdefault(message.target_id, []).append(message)
    with transaction.atomic():
        for listed in by_target.values():
            name = listed[0].target.name
            lead_log.messages_logged(
                team_id=listed[0].team_id,
                kind=LogKind.MESSAGE_RETRIED,
                records=((m.id, retried_record(target=name, seq=m.seq, state=m.state, by=by)) for m in listed),
                target=name,
            )


def messages_retry(*, messages: list[TeamMessage], by: str) -> int:
    """An operator's retry of a selection of messages (one, a filtered list, a whole team):
    each undelivered one gets a `retried` record, then its target's admission runs again
    (which pushes every undelivered message of that target, in seq order). Answers how many
    of ``messages`` were retried."""
    undelivered = [m for m in messages if m.state in PENDING_STATES]
    if not undelivered:
        return 0
    retry_logged(messages=undelivered, by=by)
    for target_id in sorted({m.target_id for m in undelivered}):
        target_admit(target_id=target_id, redeliver=True)
    return len(undelivered)


def target_retry(*, target: Member, by: str = "") -> Admission | None:
    """An operator's retry: admit (and push again) everything undelivered for ``target``;
    a member that failed to provision is asked for again, messages waiting or not."""
    if by:
        retry_logged(messages=selectors.pending_of(target=target), by=by)
    admission = target_admit(target_id=target.pk, redeliver=True)
    if target.phase == Phase.FAILED:
        starts.member_start(member_id=target.pk)
    return admission


def _admission_attempt(
    *, target: Member, status: str, has_host: bool | None, pending: list[TeamMessage], push: bool = True
) -> None:
    faults.inject("inspection")
    if status != Status.RETIRED and (refusal := budget.budget_refusal(team_id=target.team_id)):
        raise BudgetExhausted(refusal)
    if status in (Status.RUNNING, Status.IDLE):
        faults.inject("admission")
        for message in pending if push else ():
            faults.inject("push")
            events.send_now(
                target.session_channel,  # read under the row lock a hello's takeover also takes
                {"type": "session.steer", "message": steer_of(message, target_name=target.name)},
                to_channel=True,
            )
    elif status == Status.RETIRED:
        raise TargetWaiting(f"{target.name} is retired")
    elif target_waits(status=status, has_host=has_host):
        raise TargetWaiting(no_host_reason(target=target.name, status=status))
    elif not starts.start_is_fresh(target):
        starts.start_request(member=target, reason=starts.start_reason(status))


# A target in one of these statuses has no session: what is for it waits for a host to start
# one (one that failed to provision is asked again, when a host is there).
SESSIONLESS = (*TARGET_SESSIONLESS_STATUSES, Status.FAILED)


def target_waits(*, status: str, has_host: bool) -> bool:
    """Whether what is for a target in ``status`` (a message, a prompt) waits with nothing to
    be done: it has no session and no host is connected to start one. The one rule for
    admission, the sender's observation (mailbox/engine/answers.py) and the dashboard's
    "unreachable" (frontend/attention.py); the send's own statement (mailbox/engine/hot_sql.py)
    says it in SQL for the statuses a send can meet (a failed target refuses sends)."""
    return status in SESSIONLESS and not has_host


def no_host_reason(*, target: str, status: str) -> str:
    """Why a message to a target without a session waits: no host can resume it. The send
    that finds it so records it (mailbox/engine/hot_path.py), and admission says the same."""
    return f"{target} is {status} and no host is connected to resume it"


class TargetWaiting(faults.TemporaryDeliveryError):
    """Admission found nothing it could do: the target has no session and no host, or is retired."""

    code = ""


class BudgetExhausted(TargetWaiting):
    """The team's token budget is used up: nothing may start a turn there (mailbox/engine/budget.py)."""

    code = ErrorCode.TEAM_BUDGET_EXHAUSTED


def _admission_failed(*, target: Member, pending: list[TeamMessage], error: str, waiting: bool = False) -> None:
    """The messages stay where they were; write down what went wrong.

    A real failure counts (attempts and failures) and becomes each message's
    ``last_error``. A wait counts nothing: it is the queued messages' reason
    (an accepted one has moved on, and keeps no error). A failure observation
    goes to the Lead log only when a message's reason changed, so a target
    that waits for a host does not grow the log on every sweep."""
    error = error[:2000]
    if waiting:
        pending = [m for m in pending if m.state == MessageState.QUEUED]
    changed = [m for m in pending if m.last_error != error]
    if waiting:
        TeamMessage.objects.filter(pk__in=[m.id for m in changed]).update(last_error=error)
    else:
        TeamMessage.objects.filter(pk__in=[m.id for m in pending]).update(
            attempts=F("attempts") + 1, failures=F("failures") + 1, last_error=error
        )
    lead_log.messages_logged(
        team_id=target.team_id,
        kind=LogKind.MESSAGE_FAILED,
        records=(
            (m.id, failed_record(target=target.name, seq=m.seq, error=error, waiting=waiting)) for m in changed
        ),
        target=target.name,
        name_messages=False,
    )


def message_cancel(*, message: TeamMessage, by: str) -> TeamMessage:
    """An operator takes back a message that is not delivered yet: it becomes ``cancelled``
    (final), is never pushed or replayed again, and the entry of a push already in flight
    records nothing (mailbox/engine/hot_path.py's EntryJob). Whichever commits first wins: a
    delivered message is refused (409 ``MESSAGE_ALREADY_DELIVERED``); cancelling a
    cancelled one answers it as it is."""
    with transaction.atomic():
        # The target's row lock, as admission takes it: no push of it interleaves.
        Member.objects.select_for_update(no_key=True, of=("self",)).filter(pk=message.target_id).first()
        locked = (
            TeamMessage.objects.select_for_update(no_key=True, of=("self",)).select_related("target").get(pk=message.pk)
        )
        if locked.state == MessageState.DELIVERED:
            raise TeamError(
                ErrorCode.MESSAGE_ALREADY_DELIVERED,
                f"Message #{locked.seq} to {locked.target.name} is already in its history; it cannot be cancelled.",
            )
        if locked.state == MessageState.CANCELLED:
            return locked
        previous = locked.state
        TeamMessage.objects.filter(pk=locked.pk).update(
            state=MessageState.CANCELLED, cancelled_at=timezone.now(), last_error=""
        )
        lead_log.message_logged(
            message=locked,
            kind=LogKind.MESSAGE_CANCELLED,
            data=cancelled_record(target=locked.target.name, seq=locked.seq, state=previous, by=by),
            target=locked.target.name,
        )
    locked.refresh_from_db()
    return locked


def message_admit_stored(*, message_id: str, target_id: int) -> tuple[str, Admission]:
    """Admission of a message the writer stored without admitting it (a resume, a target with
    messages queued before it, a test's armed fault): its target's admission, then the
    message's state for its sender's answer."""
    faults.crash_point("after_queued_commit")
    admission = target_admit(target_id=target_id)
    if message_id in admission.admitted:
        # What admission just wrote; a fold may since have made it delivered, and
        # the sender is told "accepted" either way.
        return MessageState.ACCEPTED, admission
    return TeamMessage.objects.values_list("state", flat=True).get(pk=message_id), admission


# --- 3. recover (mailbox/operations/recovery.py runs the passes) -------------------------------------
def undelivered_for(*, member: Member) -> list[TeamMessage]:
    return selectors.pending_of(target=member)
