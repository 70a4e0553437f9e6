"""The Queue adapter: how a human's prompt (from the dashboard, the operator API or an
A2A caller) reaches a member, always as a turn of its own.

A prompt is stored ``queued`` and offered only to an idle member with no other
prompt turn under way: never merged into a running turn, never two at once. A
member with no session is started for it, as it would be for a message. A
session that says hello, or reports itself idle, is offered the next prompt
(mailbox/members/sessions.py); the prompt is ``started`` when the session's history
records the prompt entry (in that entry's commit: mailbox/engine/hot_path.py's EntryJob
runs ``prompt_started_sql`` and rings ``prompt_ring``), and ``completed`` when the
session reports itself idle again (``prompt_turn_ended``). At most
``MAX_QUEUED_PROMPTS_PER_MEMBER`` wait for one member (``PROMPT_QUEUE_FULL``), as
a target's undelivered team messages are capped. Every change of a prompt rings
the team's dashboards with ``kind: "prompt"``.
"""
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from mailbox.engine import budget, starts
from mailbox.models import HumanPrompt, PromptState
from mailbox.plumbing import events
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, Status


def prompt_submit(*, team_id: int, target_name: str, author, content: str) -> HumanPrompt:
    """Store a prompt and offer it (``prompt_store``, then ``prompt_offer``)."""
    with transaction.atomic():
        prompt = prompt_store(team_id=team_id, target_name=target_name, author=author, content=content)
    return prompt_offer(prompt)


def prompt_store(*, team_id: int, target_name: str, author, content: str) -> HumanPrompt:
    """Store a prompt ``queued``, or refuse it storing nothing; in the caller's transaction,
    so what belongs with the prompt (an A2A task) is stored with it or not at all.
    ``prompt_offer`` it after the commit."""
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "A prompt needs some content.")
    with transaction.atomic():
        # The lock prompts_dispatch takes: two prompts at once cannot both take the last place.
        target = Member.objects.select_for_update(no_key=True).filter(team_id=team_id, name=target_name).first()
        if target is None:
            raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {target_name!r} on this team.")
        if target.phase == Phase.RETIRED:
            raise TeamError(ErrorCode.TEAM_TARGET_RETIRED, f"{target_name} is retired.")
        cap = settings.STEERBOARD["MAX_QUEUED_PROMPTS_PER_MEMBER"]
        waiting = HumanPrompt.objects.filter(target=target, state=PromptState.QUEUED).count()
        if waiting >= cap:
            raise TeamError(
                ErrorCode.PROMPT_QUEUE_FULL,
                f"{target_name} already has {waiting} prompts waiting for their turn; wait for one to start.",
                limit=cap,
            )
        prompt = HumanPrompt.objects.create(team_id=team_id, target=target, author=author, content=content)
        _prompts_changed(team_id=team_id, member_name=target.name, prompt_id=prompt.id)
    return prompt


def prompt_offer(prompt: HumanPrompt) -> HumanPrompt:
    """A stored prompt goes to its member if it is idle; a member with no session is
    started for it by the team's host. Answers the prompt as it then is."""
    if prompts_dispatch(member_id=prompt.target_id) is None:
        # A member with no session is resumed for its prompt, as it would be for a message.
        starts.member_start(member_id=prompt.target_id)
    prompt.refresh_from_db()
    return prompt


def prompts_dispatch(*, member_id: int, fresh_session: bool = False) -> HumanPrompt | None:
    """Push the oldest queued prompt if the target is idle and no prompt turn is under way."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).get(pk=member_id)
        if member.status != Status.IDLE or budget.budget_refusal(team_id=member.team_id):
            return None  # not idle; or the team's token budget is used up: no prompt starts a turn
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


def prompt_withdraw(*, prompt_id: str) -> bool:
    """Take back a prompt that still waits (queued, not yet offered): it is never offered
    and counts as completed. False when it was offered or is under way already: then
    only interrupting its turn stops it (an A2A CancelTask, delegation/tasks.py)."""
    with transaction.atomic():
        prompt = HumanPrompt.objects.get(pk=prompt_id)
        # The lock prompts_dispatch takes: the prompt is not offered meanwhile.
        member = Member.objects.select_for_update(no_key=True).get(pk=prompt.target_id)
        withdrawn = HumanPrompt.objects.filter(pk=prompt_id, state=PromptState.QUEUED, pushed_at__isnull=True).update(
            state=PromptState.COMPLETED, completed_at=timezone.now()
        )
        if withdrawn:
            _prompts_changed(team_id=member.team_id, member_name=member.name, prompt_id=prompt_id)
    return bool(withdrawn)


# --- a prompt's turn starts and ends ---------------------------------------------------------
def prompt_started_by(entry) -> str | None:
    """The prompt a history entry starts the turn of (its ``prompt_id``), if it is a prompt entry."""
    return entry.prompt_id if entry.kind == "prompt" else None


def prompt_started_sql(*, now: str, prompt: str, member: str) -> str:
    """The statement that marks a prompt ``started``, run in the commit of the history entry
    that starts its turn (mailbox/engine/hot_sql.py builds the entry's statements with it): only a
    queued prompt, only the member's own. ``now``, ``prompt``, ``member``: the placeholders
    (or SQL) the caller's statement passes them as."""
    return (
        f"UPDATE {HumanPrompt._meta.db_table} SET state = '{PromptState.STARTED}', started_at = {now} "
        f"WHERE id = {prompt} AND target_id = {member} AND state = '{PromptState.QUEUED}'"
    )


def prompt_ring(*, team_id: int, member_name: str, prompt_id: str | None = None) -> tuple[int, str, dict]:
    """The dashboards' doorbell for a change of a member's prompts: (team, kind, data)."""
    return team_id, "prompt", {"member": member_name, **({"prompt_id": prompt_id} if prompt_id else {})}


def _prompts_changed(*, team_id: int, member_name: str, prompt_id: str) -> None:
    """Ring the dashboards after the commit (``prompt_ring``)."""
    team, kind, data = prompt_ring(team_id=team_id, member_name=member_name, prompt_id=prompt_id)
    events.dashboard_notify(team, kind, **data)


def prompt_turn_ended(*, member_id: int) -> None:
    """The member's session is idle: the prompt turn it was in, if any, is ``completed``.
    In the caller's transaction (the status it records)."""
    HumanPrompt.objects.filter(target_id=member_id, state=PromptState.STARTED).update(
        state=PromptState.COMPLETED, completed_at=timezone.now()
    )
