"""Agent and host sessions: what happens when they connect, report status and leave.

Human prompts are the Queue adapter's (mailbox/queue_adapter.py); a session's
hello and each idle status offer it the next one.
"""
from django.db import transaction
from django.utils import timezone

from mailbox import delivery, events, lead_log, presence, queue_adapter, usage
from mailbox.models import HumanPrompt, PromptState
from teams.errors import ErrorCode, TeamError
from teams.models import Member, SessionState, Status
from teams.services import member_fail, member_session_end, member_session_set


def _member_changed(member: Member, previous: str) -> None:
    if member.status != previous:
        lead_log.member_logged(
            team_id=member.team_id,
            data={"member": member.name, "status": member.status, "previous": previous},
            status=member.status,
        )


# --- agent sessions -------------------------------------------------------------------------
def session_hello(*, member_id: int, state: str, channel: str) -> list[dict]:
    """A session connected: record its state, admit what waits, and return every
    undelivered message for it in seq order (the replay)."""
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        _member_changed(member, previous)
    presence.session_attached(member_id=member_id, channel=channel)
    # Admitted here, steered by the replay below: each undelivered message once. Nothing while
    # the team's token budget is used up: a replay would start a turn (mailbox/usage.py).
    delivery.target_admit(target_id=member_id, redeliver=False, push=False)
    replay = [] if usage.budget_refusal(team_id=member.team_id) else [
        delivery.steer_of(m, target_name=member.name) for m in delivery.undelivered_for(member=member)
    ]
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id, fresh_session=True)
    return replay


def session_status(*, member_id: int, state: str, channel: str) -> Member:
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        _member_changed(member, previous)
        if state == SessionState.IDLE:
            # A started prompt's turn is over.
            HumanPrompt.objects.filter(target_id=member_id, state=PromptState.STARTED).update(
                state=PromptState.COMPLETED, completed_at=timezone.now()
            )
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id)
    return member


def session_closed(*, member_id: int, channel: str) -> None:
    with transaction.atomic():
        member = Member.objects.get(pk=member_id)
        previous = member.status
        ended = member_session_end(member_id=member_id, channel=channel)
        if ended is not None:
            _member_changed(ended, previous)
    presence.session_detached(channel=channel)


def member_interrupt(*, lead: Member, target_name: str) -> str:
    if not lead.is_lead:
        raise TeamError(ErrorCode.LEAD_ONLY, "Only the Lead can interrupt a teammate.")
    target = Member.objects.filter(team_id=lead.team_id, name=target_name).first()
    if target is None:
        raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {target_name!r} on this team.")
    if target.pk == lead.pk:
        raise TeamError(ErrorCode.TEAM_SELF_MESSAGE, "The Lead cannot interrupt itself.")
    previous = target.status
    if previous == Status.RUNNING:
        events.send_now(target.session_channel, {"type": "session.interrupt"}, to_channel=True)
    return previous


# --- hosts ---------------------------------------------------------------------------------
def host_disconnected(*, channel: str) -> None:
    presence.host_detached(channel=channel)


def host_start_failed(*, team_id: int, member_name: str, error: str) -> None:
    member = Member.objects.filter(team_id=team_id, name=member_name).first()
    if member is None:
        return
    previous = member.status
    with transaction.atomic():
        failed = member_fail(member_id=member.pk)
        Member.objects.filter(pk=member.pk).update(start_requested_at=None)
        lead_log.member_logged(team_id=team_id, data={"member": member_name, "start_failed": error[:2000]})
        _member_changed(failed, previous)
