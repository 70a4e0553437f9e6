"""An operator sets a team's token budget (docs/operations.md, "Usage and budgets"; the rule
itself, and what stops when it is used up: mailbox/engine/budget.py).

A budget that is no longer used up lets what waited for it go on at once, in order: every
member's undelivered messages are admitted again (pushed, or a host asked to resume the
member), and waiting prompts are offered or their members started, exactly as recovery
would.
"""
from django.db import transaction

from mailbox import selectors
from mailbox.engine import budget, delivery, lead_log, queue_adapter, starts
from mailbox.plumbing import events
from teams.models import Member, Status, Team


def team_budget_set(*, team: Team, tokens: int | None, by: str) -> dict:
    """Set (``None``: clear, back to the server's default) the team's budget of input +
    output tokens; answers the budget as it is now."""
    with transaction.atomic():
        Team.objects.filter(pk=team.pk).update(token_budget=tokens)
        lead_log.budget_logged(team_id=team.pk, data={"tokens": tokens, "by": by})
    found = budget.budget_of(team_id=team.pk)
    if not found.exhausted:
        _waiting_released(team_id=team.pk)
    return found.out()


def _waiting_released(*, team_id: int) -> None:
    members = list(Member.objects.filter(team_id=team_id).order_by("id"))
    for member in members:
        delivery.target_admit(target_id=member.pk, redeliver=True)
    for member_id in selectors.members_awaiting_prompt(team_id=team_id):
        starts.member_start(member_id=member_id)
    for member in members:
        if member.status == Status.IDLE:
            queue_adapter.prompts_dispatch(member_id=member.pk)
    events.dashboard_notify(team_id, "budget")


