"""ask_human: a member asks a person and waits; the person's answer comes back as a team message.

- ``ask_create`` (the tool's body): the ask is a row and a ``team/ask/asked`` Lead-log record,
  committed before the tool answers ``{ask_id, state: "pending"}``; the dashboards ring.
- ``ask_answer`` (an operator, over REST or the dashboard) and ``asks_expire`` (the sweeper,
  for asks past their ``expires_at``, decision ``"expired"``) end an ask the same way, in one
  transaction: a conditional UPDATE from ``pending`` (whoever commits first wins; the other
  gets 409 ``ASK_NOT_PENDING``), the answer stored as a team message to the asker by the
  writer's ``SendJob`` (kind ``human_answer``, the asker its own sender: it is its ask's
  answer coming back; ``hot_path.run_now``, the one write path), and a ``team/ask/answered``
  (or ``team/ask/expired``) record naming that message. After the commit the message is
  admitted like any other (``delivery.message_admit_stored``): a running member is steered,
  an idle one starts a turn, an inactive one is resumed by its host, and recovery repeats
  what is lost. Its ``steer`` frame carries ``ask_id``, ``decision``, ``answer`` and
  ``answered_by`` (``delivery.steer_of``).

"Has this member a pending ask?" is ``selectors.pending_asks_for(member)``.
"""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from mailbox import selectors
from mailbox.engine import delivery, hot_path, lead_log
from mailbox.plumbing import events
from mailbox.models import TARGET_REFUSING_PHASES, AskKind, AskState, HumanAsk, LeadLogRecord, LogKind, MessageKind
from teams.errors import ErrorCode, TeamError
from teams.models import Member

log = logging.getLogger(__name__)

EXPIRED = "expired"  # the decision of an ask nobody answered in time
MAX_ANSWER_CHARS = 16000
MAX_COMMENT_CHARS = 4000


# --- asking ---------------------------------------------------------------------------------
def ask_create(
    *, member: Member, question: str, kind: str = AskKind.QUESTION, options: list[str], context: str = "",
    expires_in_s: int | None = None,
) -> HumanAsk:
    """A member's question to a person: durable (the row and its Lead-log record) before it is
    answered to the asker. At most ``MAX_PENDING_ASKS_PER_MEMBER`` wait at once."""
    cap = settings.STEERBOARD["MAX_PENDING_ASKS_PER_MEMBER"]
    now = timezone.now()
    with transaction.atomic():
        waiting = selectors.pending_asks_for(member).count()
        if waiting >= cap:
            raise TeamError(
                ErrorCode.TOO_MANY_ASKS,
                f"You already have {waiting} asks waiting for a person; wait for their answers (they come as "
                "messages) before asking more.",
                limit={"pending_asks_per_member": cap},
            )
        ask = HumanAsk.objects.create(
            team_id=member.team_id, member=member, kind=kind, question=question, options=options, context=context,
            created_at=now, expires_at=now + timedelta(seconds=expires_in_s) if expires_in_s else None,
        )
        LeadLogRecord.objects.create(
            team_id=member.team_id, kind=LogKind.ASK_ASKED,
            data={"ask_id": ask.id, "member": member.name, "kind": kind, "question": question, "options": options,
                  "expires_at": ask.expires_at.isoformat() if ask.expires_at else None},
        )
        events.dashboard_notify(member.team_id, "ask", member=member.name, ask_id=ask.id)
    return ask


# --- answering ------------------------------------------------------------------------------
def ask_answer(
    *, team_id: int, ask_id: str, decision: str | None = None, answer: str = "", comment: str = "", by: str
) -> HumanAsk:
    """An operator's answer: the first one wins (409 ``ASK_NOT_PENDING`` for the rest, and for an
    ask past its deadline, which is answered "expired" instead)."""
    ask = selectors.ask_get(team_id=team_id, ask_id=ask_id)
    decision = _decision_checked(ask, decision=decision, answer=answer)
    if ask.state == AskState.PENDING and ask.expires_at is not None and ask.expires_at <= timezone.now():
        _ended(ask, decision=EXPIRED, answer="", comment="", by="", kind=LogKind.ASK_EXPIRED)
        ask.refresh_from_db()
    if not _ended(ask, decision=decision, answer=answer, comment=comment, by=by, kind=LogKind.ASK_ANSWERED):
        ask.refresh_from_db()
        raise TeamError(
            ErrorCode.ASK_NOT_PENDING,
            f"Ask {ask.id} is already {ask.state}"
            + (f" ({ask.decision or 'answered'}, by {ask.answered_by})" if ask.answered_by else "")
            + "; the first answer counts.",
            state=ask.state,
        )
    ask.refresh_from_db()
    return ask


def _decision_checked(ask: HumanAsk, *, decision: str | None, answer: str) -> str:
    """The answer's decision: one of the ask's options, or none when it is answered in words."""
    options = list(ask.options or [])
    if decision:
        if decision not in options:
            offered = f"one of {', '.join(map(repr, options))}" if options else "none (answer it in words)"
            raise TeamError(
                ErrorCode.ASK_INVALID_DECISION, f"decision {decision!r} is not an option of this ask; it takes {offered}."
            )
        return decision
    if not (answer or "").strip():
        raise TeamError(
            ErrorCode.VALIDATION_ERROR,
            "An answer needs a decision (one of the ask's options) or an answer in words.",
        )
    return ""


def asks_expire(*, limit: int = 100) -> int:
    """The sweeper's: every pending ask past its deadline is answered "expired" (each on its own,
    so one that cannot be answered does not hold up the rest), and the asks of members retired
    meanwhile end. How many were expired."""
    now = timezone.now()
    # A retired (or never started) asker takes no messages: its asks end, with nobody to tell.
    gone = HumanAsk.objects.filter(state=AskState.PENDING, member__phase__in=TARGET_REFUSING_PHASES)
    for team_id in set(gone.values_list("team_id", flat=True)):
        events.dashboard_notify(team_id, "ask")
    ended = gone.update(state=AskState.EXPIRED, answered_at=now, decision=EXPIRED)
    due = list(
        HumanAsk.objects.filter(state=AskState.PENDING, expires_at__isnull=False, expires_at__lte=now)
        .select_related("member").order_by("expires_at")[:limit]
    )
    expired = ended
    for ask in due:
        try:
            expired += _ended(ask, decision=EXPIRED, answer="", comment="", by="", kind=LogKind.ASK_EXPIRED)
        except TeamError as exc:
            if exc.code in (ErrorCode.TEAM_TARGET_RETIRED, ErrorCode.TEAM_TARGET_FAILED):
                # The asker takes no messages any more: the ask ends, with nobody to tell.
                expired += HumanAsk.objects.filter(pk=ask.pk, state=AskState.PENDING).update(
                    state=AskState.EXPIRED, answered_at=now, decision=EXPIRED
                )
            else:  # its mailbox is full just now: the next pass tries again
                log.warning("ask %s could not be answered expired yet: %s", ask.id, exc.message)
    return expired


def _ended(ask: HumanAsk, *, decision: str, answer: str, comment: str, by: str, kind: str) -> bool:
    """End a pending ask and send its answer to the asker, in one transaction; False when it was
    not pending any more (someone else's answer, or the expiry, committed first)."""
    member = ask.member
    now = timezone.now()
    state = AskState.EXPIRED if kind == LogKind.ASK_EXPIRED else AskState.ANSWERED
    with transaction.atomic():
        won = HumanAsk.objects.filter(pk=ask.pk, state=AskState.PENDING)
        if state == AskState.ANSWERED:  # past its deadline it is the expiry's, whether swept yet or not
            won = won.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        if not won.update(state=state, answered_at=now, decision=decision, answer=answer, comment=comment,
                          answered_by=by):
            return False
        job = hot_path.SendJob(
            sender=member, target_name=member.name, content=_answer_text(ask, decision, answer, comment, by),
            kind=MessageKind.HUMAN_ANSWER, may_admit=False,
        )
        # First in the answer message's trace (the foreign key is checked at the commit).
        build = lead_log.ask_answered_record if kind == LogKind.ASK_ANSWERED else lead_log.ask_expired_record
        LeadLogRecord.objects.create(
            team_id=ask.team_id, kind=kind, message_id=job.message_id,
            data=build(ask_id=ask.id, member=member.name, question=ask.question[:500], decision=decision or None,
                       answered_by=by or None),
        )
        hot_path.run_now(job)
        HumanAsk.objects.filter(pk=ask.pk).update(answer_message_id=job.message_id)
        events.dashboard_notify(ask.team_id, "ask", member=member.name, ask_id=ask.id)
    # Admitted after the commit, as every send the writer did not admit itself.
    delivery.message_admit_stored(message_id=job.message_id, target_id=member.pk)
    return True


def _answer_text(ask: HumanAsk, decision: str, answer: str, comment: str, by: str) -> str:
    """What the asker's model reads: the answer, with the question it answers."""
    question = ask.question if len(ask.question) <= 500 else ask.question[:500] + "…"
    if decision == EXPIRED and not by:
        return f"Nobody answered your ask {ask.id} before it expired.\n\nYou asked: {question}\n\nDecision: expired"
    lines = [f"{by} answered your ask {ask.id}.", "", f"You asked: {question}", ""]
    if decision:
        lines.append(f"Decision: {decision}")
    if answer.strip():
        lines.append(f"Answer: {answer}")
    if comment.strip():
        lines.append(f"Comment: {comment}")
    return "\n".join(lines)
