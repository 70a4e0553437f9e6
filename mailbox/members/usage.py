"""What the members' models used and cost (docs/operations.md,
"Usage and budgets").

- **Recorded** by the writer: a new history entry that reports its model reply's ``usage``
  (``wire.Usage``: the model, input tokens with the cached ones among them, output
  tokens) adds it to its member's sum for that model (``MemberUsage``) in the entry's
  commit; a folded repeat adds nothing (mailbox/engine/hot_sql.py, ``usage_add``).
- **Read** here: per member (``team_usage``), per team (``usage_total``), per turn
  (``turn_usage``, from the turn's entries), with what it cost from the price table
  (``STEERBOARD_MODEL_PRICES``: US dollars per million tokens; a model not in it shows
  its tokens only).
- **The budget**: a team may use its own ``token_budget`` (set by an operator,
  mailbox/engine/budget.py), else ``STEERBOARD_TEAM_TOKEN_BUDGET``, of input + output tokens.
  Once its members' replies reach it, nothing starts a new turn there: admission keeps
  messages queued and says why (``budget_refusal``), the Queue adapter offers no prompt,
  no host is asked to start a member. The writer's in-commit admission asks the same
  question in SQL (``hot_sql.budget_exhausted``).
"""
from django.conf import settings

from mailbox import selectors
from mailbox.engine.budget import budget_of
from mailbox.members import activity
from mailbox.models import MemberUsage
from teams import selectors as team_selectors
from teams.models import Team

ZERO = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "replies": 0}


def prices() -> dict[str, dict[str, float]]:
    return settings.STEERBOARD.get("MODEL_PRICES") or {}


def cost(*, model: str, input_tokens: int, output_tokens: int, cached_tokens: int) -> float | None:
    """US dollars, or None for a model the price table does not know."""
    price = prices().get(model)
    if price is None:
        return None
    uncached = input_tokens - cached_tokens
    dollars = uncached * price["input"] + cached_tokens * price["cached"] + output_tokens * price["output"]
    return round(dollars / 1_000_000, 6)


def usage_out(rows: list[dict]) -> dict:
    """Sums of per-model rows (``model``, token counts, ``replies``): the tokens, and the
    cost when every model in them has a price (``cost_usd`` None otherwise), by model too."""
    total = dict(ZERO)
    models, dollars = [], 0.0
    for row in rows:
        for key in ZERO:
            total[key] += row[key]
        price = cost(model=row["model"], input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
                     cached_tokens=row["cached_tokens"])
        models.append({"model": row["model"], **{k: row[k] for k in ZERO}, "cost_usd": price})
        dollars = dollars + price if price is not None and dollars is not None else None
    return {**total, "tokens": total["input_tokens"] + total["output_tokens"],
            "cost_usd": round(dollars, 6) if models and dollars is not None else (0.0 if not models else None),
            "models": models}


def team_usage(*, team_id: int) -> dict[int, dict]:
    """Per member of the team (by id): what its replies used, with their cost."""
    rows: dict[int, list[dict]] = {}
    fields = ("member_id", "model", *ZERO)
    for row in MemberUsage.objects.filter(member__team_id=team_id).order_by("member_id", "model").values(*fields):
        rows.setdefault(row["member_id"], []).append(row)
    return {member_id: usage_out(found) for member_id, found in rows.items()}


def usage_total(per_member: dict[int, dict]) -> dict:
    """A team's total from ``team_usage``: its members' rows summed by model."""
    by_model: dict[str, dict] = {}
    for usage in per_member.values():
        for row in usage["models"]:
            sums = by_model.setdefault(row["model"], {"model": row["model"], **ZERO})
            for key in ZERO:
                sums[key] += row[key]
    return usage_out(list(by_model.values()))


def turn_usage(entries) -> dict[str, dict]:
    """Per turn id: the usage its entries report (``entries``: (turn id, entry data) pairs)."""
    by_turn: dict[str, dict[str, dict]] = {}
    for turn_id, data in entries:
        usage = data.get("usage") if isinstance(data, dict) else None
        if not isinstance(usage, dict) or not usage.get("model"):
            continue
        sums = by_turn.setdefault(turn_id, {}).setdefault(usage["model"], {"model": usage["model"], **ZERO})
        for key in ("input_tokens", "output_tokens", "cached_tokens"):
            value = usage.get(key, 0)
            sums[key] += value if isinstance(value, int) else 0
        sums["replies"] += 1
    return {turn_id: usage_out(list(models.values())) for turn_id, models in by_turn.items()}


def roster(*, team_id: int, members=None) -> dict:
    """The roster (``members``, or the team's) with what each member is doing (its activity)
    and what its replies used, the team's total and its budget (list_agents' result; the
    operator REST and the dashboard show the same)."""
    per_member = team_usage(team_id=team_id)
    members = team_selectors.member_list(team_id=team_id) if members is None else members
    doing = activity.members_activity(members)
    agents = [
        {**team_selectors.member_out(member, activity=doing[member.pk].out()),
         "usage": per_member.get(member.pk, usage_out([]))}
        for member in members
    ]
    return {"agents": agents, "usage": usage_total(per_member), "budget": budget_of(team_id=team_id).out()}


def team_summary(*, team: Team) -> dict:
    """The operator REST's team: the roster with each member's message counts and usage, the
    team's usage and budget, and the board."""
    counts = selectors.member_counts(team=team)
    found = team_selectors.member_list(team_id=team.pk)
    found_roster = roster(team_id=team.pk, members=found)
    members = [
        {**agent, **counts.get(member.pk, selectors.no_messages())} for member, agent in zip(found, found_roster["agents"])
    ]
    tasks, _ = team_selectors.task_list(team_id=team.pk, limit=100)
    return {
        "team": team.name, "members": members, "usage": found_roster["usage"], "budget": found_roster["budget"],
        "tasks": team_selectors.tasks_out(tasks, team_id=team.pk),
    }
