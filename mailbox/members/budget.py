"""A team's token budget in action (docs/operations.md, "Usage and budgets"; mailbox/members/usage.py
reads it, and admission, the Queue adapter and the hosts refuse to start a turn past it).

- **Used up**: once a reply's usage takes the team to its budget, every member running a
  turn is interrupted, so it ends after the step it is in (``turns_stopped``; the writer
  asks after each entry that reports usage).
- **Raised**: an operator sets the budget (``team_budget_set``); a budget that is no
  longer used up lets what waited for it go on at once, in order: every member's
  undelivered messages are admitted again (pushed, or a host asked to resume the
  member), and waiting prompts are offered or their members started, exactly as
  recovery would.
"""
import logging

from django.db import transaction

from mailbox import selectors
from mailbox.engine import delivery, events, lead_log, queue_adapter
from mailbox.members import hosts, usage
from teams.models import Member, SessionState, Status, Team

log = logging.getLogger(__name__)


def team_budget_set(*, team: Team, tokens: int | None, by: str) -> dict:
    """Set (``None``: clear, back to the server's default) the team's budget of input +
    output tokens; answers the budget as it is now."""
    with transaction.atomic():
        Team.objects.filter(pk=team.pk).update(token_budget=tokens)
        lead_log.budget_logged(team_id=team.pk, data={"tokens": tokens, "by": by})
    budget = usage.budget_of(team_id=team.pk)
    if not budget.exhausted:
        _waiting_released(team_id=team.pk)
    return budget.out()


def _waiting_released(*, team_id: int) -> None:
    members = list(Member.objects.filter(team_id=team_id).order_by("id"))
    for member in members:
        delivery.target_admit(target_id=member.pk, redeliver=True)
    for member_id in selectors.members_awaiting_prompt(team_id=team_id):
        hosts.member_start(member_id=member_id)
    for member in members:
        if member.status == Status.IDLE:
            queue_adapter.prompts_dispatch(member_id=member.pk)
    events.dashboard_notify(team_id, "budget")


def turns_stopped(*, team_id: int) -> list[str]:
    """When the team's budget is used up: interrupt every member running a turn (it ends
    after its current step). Answers whom it interrupted."""
    budget = usage.budget_of(team_id=team_id)
    if not budget.exhausted:
        return []
    running = list(
        Member.objects.filter(team_id=team_id, session_state=SessionState.RUNNING)
        .exclude(session_channel="")
        .values_list("name", "session_channel")
    )
    stopped = []
    for name, channel in running:
        try:
            events.send_now(channel, {"type": "session.interrupt"}, to_channel=True)
            stopped.append(name)
        except Exception:  # the layer is away: the turn goes on, and no new one starts
            log.warning("could not interrupt %s for the used-up budget", name, exc_info=True)
    if stopped:
        lead_log.budget_logged(
            team_id=team_id, data={"exhausted": True, "used": budget.used, "tokens": budget.tokens, "interrupted": stopped}
        )
    return stopped
