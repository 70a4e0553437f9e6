"""Agent and host sessions: what happens when they connect, report status and leave.

Also the Queue adapter: human prompts wait for an idle target and are pushed
one at a time, each its own turn, never merged into a running turn.
"""
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from mailbox import delivery, events, lead_log, presence
from mailbox.models import HistoryEntry, HumanPrompt, PromptState
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, SessionState, Status
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
    # Admitted here, steered by the replay below: each undelivered message once.
    delivery.target_admit(target_id=member_id, redeliver=False, push=False)
    replay = [delivery.message_wire(m, target_name=member.name) for m in delivery.undelivered_for(member=member)]
    if state == SessionState.IDLE:
        prompts_dispatch(member_id=member_id, fresh_session=True)
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
        prompts_dispatch(member_id=member_id)
    return member


def session_closed(*, member_id: int, channel: str) -> None:
    with transaction.atomic():
        member = Member.objects.get(pk=member_id)
        previous = member.status
        ended = member_session_end(member_id=member_id, channel=channel)
        if ended is not None:
            _member_changed(ended, previous)
    presence.session_detached(channel=channel)


def entry_report(*, member: Member, entry: dict) -> bool:
    """A session reported a history entry. Returns whether it was new (False: folded)."""
    _, created = delivery.entry_record(member=member, entry=entry)
    prompt_id = entry.get("prompt_id") if entry.get("kind") == "prompt" else None
    if prompt_id:
        HumanPrompt.objects.filter(pk=prompt_id, target=member, state=PromptState.QUEUED).update(
            state=PromptState.STARTED, started_at=timezone.now()
        )
        events.dashboard_notify(member.team_id, "prompt", member=member.name, prompt_id=prompt_id)
    return created


def history_page(*, member: Member, after: int = 0, limit: int = 500) -> tuple[list[dict], int | None]:
    """A member's own durable history, in order, for cold-resume."""
    rows = list(HistoryEntry.objects.filter(member=member, id__gt=after).order_by("id")[: limit + 1])
    page = rows[:limit]
    entries = [{**r.data, "position": r.id} for r in page]
    return entries, (page[-1].id if len(rows) > limit else None)


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


# --- the Queue adapter -----------------------------------------------------------------------
def prompt_submit(*, team_id: int, target_name: str, author, content: str) -> HumanPrompt:
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "A prompt needs some content.")
    target = Member.objects.filter(team_id=team_id, name=target_name).first()
    if target is None:
        raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {target_name!r} on this team.")
    if target.phase == Phase.RETIRED:
        raise TeamError(ErrorCode.TEAM_TARGET_RETIRED, f"{target_name} is retired.")
    with transaction.atomic():
        prompt = HumanPrompt.objects.create(team_id=team_id, target=target, author=author, content=content)
        events.dashboard_notify(team_id, "prompt", member=target.name, prompt_id=prompt.id)
    if prompts_dispatch(member_id=target.pk) is None:
        # A member with no session is resumed for its prompt, as it would be for a message.
        delivery.member_start(member_id=target.pk)
    prompt.refresh_from_db()
    return prompt



def prompts_dispatch(*, member_id: int, fresh_session: bool = False) -> HumanPrompt | None:
    """Push the oldest queued prompt if the target is idle and no prompt turn is under way."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).get(pk=member_id)
        if member.status != Status.IDLE:
            return None
        mine = HumanPrompt.objects.filter(target=member)
        if fresh_session:
            # A prompt pushed to (or started by) a session that has since gone never
            # completed; offer it again to the new session.
            mine.filter(state__in=[PromptState.QUEUED, PromptState.STARTED]).update(
                state=PromptState.QUEUED, pushed_at=None
            )
        elif mine.filter(Q(state=PromptState.STARTED) | Q(state=PromptState.QUEUED, pushed_at__isnull=False)).exists():
            return None  # one prompt turn at a time
        prompt = (
            HumanPrompt.objects.filter(target=member, state=PromptState.QUEUED)
            .select_related("author")
            .order_by("created_at")
            .first()
        )
        if prompt is None:
            return None
        prompt.pushed_at = timezone.now()
        prompt.save(update_fields=["pushed_at"])
        events.send_after_commit(
            member.session_channel,
            {
                "type": "session.prompt",
                "prompt": {"id": prompt.id, "author": prompt.author.get_username(), "content": prompt.content},
            },
            to_channel=True,
        )
    return prompt
