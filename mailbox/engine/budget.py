"""A team's token budget (docs/operations.md, "Usage and budgets"): the rule, and the rule in action.

- **The rule**: a team may use its own ``token_budget`` (set by an operator,
  mailbox/members/budget.py), else ``STEERBOARD_TEAM_TOKEN_BUDGET``, of input + output tokens
  (what its members' replies used, mailbox/members/usage.py). Once they reach it, nothing
  starts a new turn there: admission keeps messages queued and says why
  (``budget_refusal``), the Queue adapter offers no prompt, no host is asked to start a
  member (mailbox/engine/starts.py). The writer's in-commit admission asks the same
  question in SQL (``hot_sql.budget_exhausted``).
- **Used up**: once a reply's usage takes the team to its budget, every member running a
  turn is interrupted, so it ends after the step it is in (``turns_stopped``; the writer
  asks after each entry that reports usage).
- **Raised**: an operator sets the budget (mailbox/members/budget.py).
"""
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

from mailbox.engine import lead_log
from mailbox.models import MemberUsage
from mailbox.plumbing import events
from teams.errors import ErrorCode
from teams.models import Member, SessionState, Team

log = logging.getLogger(__name__)


# --- the budget --------------------------------------------------------------------------------
@dataclass
class Budget:
    tokens: int | None  # None: no budget
    used: int
    own: bool  # the team's own, set by an operator (else the setting's)

    @property
    def exhausted(self) -> bool:
        return self.tokens is not None and self.used >= self.tokens

    def out(self) -> dict:
        left = None if self.tokens is None else max(0, self.tokens - self.used)
        return {"tokens": self.tokens, "used": self.used, "left": left, "exhausted": self.exhausted,
                "source": "team" if self.own else ("setting" if self.tokens is not None else "none")}


def tokens_used(*, team_id: int) -> int:
    found = MemberUsage.objects.filter(member__team_id=team_id).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    return (found["i"] or 0) + (found["o"] or 0)


def budget_of(*, team_id: int) -> Budget:
    own = Team.objects.values_list("token_budget", flat=True).get(pk=team_id)
    tokens = own if own is not None else settings.STEERBOARD.get("TEAM_TOKEN_BUDGET")
    return Budget(tokens=tokens, used=tokens_used(team_id=team_id) if tokens is not None else 0, own=own is not None)


def exhausted_reason(*, used, tokens) -> str:
    """Why nothing starts a turn: the team's models used ``used`` of its ``tokens``-token budget.
    (The send's statement fills the same words in from its ``{used}`` and ``{tokens}``.)"""
    return (
        f"{ErrorCode.TEAM_BUDGET_EXHAUSTED}: the team's models have used {used} of its "
        f"{tokens}-token budget; nothing starts a new turn until an operator raises it "
        "(the message is stored and is delivered, in order, once it is raised)."
    )


def exhausted_text(budget: Budget) -> str:
    return exhausted_reason(used=budget.used, tokens=budget.tokens)


def teams_exhausted(*, team_ids: list[int]) -> set[int]:
    """Of these teams, those whose budget is used up (two reads for them all)."""
    default = settings.STEERBOARD.get("TEAM_TOKEN_BUDGET")
    budgets = {pk: own if own is not None else default
               for pk, own in Team.objects.filter(pk__in=team_ids).values_list("pk", "token_budget")}
    budgets = {pk: tokens for pk, tokens in budgets.items() if tokens is not None}
    if not budgets:
        return set()
    used = (
        MemberUsage.objects.filter(member__team_id__in=list(budgets)).values("member__team_id")
        .annotate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    )
    return {row["member__team_id"] for row in used if row["i"] + row["o"] >= budgets[row["member__team_id"]]}


def budget_refusal(*, team_id: int) -> str | None:
    """Why nothing may start a turn in the team now (its budget is used up), or None."""
    budget = budget_of(team_id=team_id)
    return exhausted_text(budget) if budget.exhausted else None


# --- the budget in action ---------------------------------------------------------------------
def turns_stopped(*, team_id: int) -> list[str]:
    """When the team's budget is used up: interrupt every member running a turn (it ends
    after its current step). Answers whom it interrupted."""
    budget = budget_of(team_id=team_id)
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
