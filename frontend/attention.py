"""Needs attention: what an operator should look at first (docs/dashboard.md, "Needs attention").

Three kinds of item, each with how long it has been so, the last real error and
what can be done:

- ``message``: queued or accepted for longer than ``ATTENTION_AFTER`` seconds
  (default ``REDELIVER_AFTER``), counted from when it entered that state;
- ``member``: failed to start, or unreachable: no session, no host connected to
  start it, and work (a message, a prompt) waiting for it past the threshold;
- ``prompt``: a human prompt still queued after the threshold;
- ``stalled``: a member whose turn is open with no history entry for
  ``STEERBOARD_STALL_AFTER`` seconds (its activity, mailbox/activity.py), with its last
  entry and that entry's age;
- ``budget``: the team's token budget is used up (mailbox/usage.py): no new turn starts
  until an operator raises it. It heads the list.

Reads are bounded: the team's pending messages (at most the mailbox limit per
target, read through the (state, queued_at) index), its queued prompts, its roster
and its members' activity (one read, mailbox/activity.py; the snapshot hands over
what it read).
"""
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from mailbox import activity, usage
from mailbox.models import PENDING_STATES, HostPresence, HumanPrompt, MemberUsage, MessageState, PromptState, TeamMessage
from teams.models import Activity, Member, Phase, Status, Team
from teams.wire_format import iso

ITEM_WINDOW = 50  # items shown; the count is of all
PENDING_READ = 1000  # pending messages of a team read at most (8 members x 64 by default)


def threshold() -> float:
    return float(settings.STEERBOARD.get("ATTENTION_AFTER") or settings.STEERBOARD["REDELIVER_AFTER"])


def team_attention(
    *, team: Team, roster: list[Member] | None = None, activities: dict[int, activity.MemberActivity] | None = None
) -> dict:
    """``{"threshold", "count", "items", "due_at"}``: ``due_at`` is when the next
    pending message or prompt crosses the threshold, or the next working member
    would stall (the page reads again then). ``roster`` and its ``activities``: what
    the caller already read, else read here."""
    now = timezone.now()
    after = timedelta(seconds=threshold())
    items: list[dict] = []
    due: list[datetime] = []

    roster = list(Member.objects.filter(team=team).order_by("id")) if roster is None else roster
    activities = activity.members_activity(roster, now=now) if activities is None else activities
    by_id = {m.pk: m for m in roster}
    # Ordered by state first and joined to nothing: SQLite then reads the pending few through
    # the (state, queued_at) index (recovery.messages_recover's way); otherwise it walked the team's
    # whole history through (team, -queued_at).
    pending = list(
        TeamMessage.objects.filter(team=team, state__in=PENDING_STATES).order_by(
            "state", "queued_at"
        )[:PENDING_READ]
    )
    pending.sort(key=lambda m: m.queued_at)
    for m in pending:
        m.sender, m.target = by_id[m.sender_id], by_id[m.target_id]
        since = m.accepted_at if m.state == MessageState.ACCEPTED and m.accepted_at else m.queued_at
        if since + after > now:
            due.append(since + after)
            continue
        items.append(
            {
                "kind": "message",
                "message_id": m.id,
                "member": m.target.name,
                "sender": m.sender.name,
                "seq": m.seq,
                "state": m.state,
                "since": iso(since),
                "seconds": round((now - since).total_seconds(), 1),
                "error": m.last_error,
                "attempts": m.attempts,
                "failures": m.failures,
                "repushes": m.repushes,
            }
        )

    # Work that has waited past the threshold: a member without a session is only
    # unreachable once something has waited for it that long.
    waiting_for = {m.target_id for m in pending if m.queued_at + after <= now}
    prompts = list(
        HumanPrompt.objects.filter(team=team, state=PromptState.QUEUED).select_related("target", "author").order_by(
            "created_at"
        )[:ITEM_WINDOW]
    )
    waiting_for |= {p.target_id for p in prompts if p.created_at + after <= now}
    no_session = [m for m in roster if m.status in (Status.INACTIVE, Status.PROVISIONING) and m.pk in waiting_for]
    has_host = bool(no_session) and HostPresence.objects.filter(team=team).exists()
    failed = [m for m in roster if m.phase == Phase.FAILED]
    errors = activity.start_failures(team_id=team.pk) if failed else {}
    for member in roster:
        if member.phase == Phase.FAILED:
            reason = "failed to start"
        elif member in no_session and not has_host:
            reason = "unreachable: no session and no host connected to start it"
        else:
            continue
        items.append(
            {
                "kind": "member",
                "member": member.name,
                "status": member.status,
                "reason": reason,
                "since": iso(member.status_changed_at),
                "seconds": round((now - member.status_changed_at).total_seconds(), 1),
                "error": errors.get(member.name, ""),
            }
        )

    # A turn open and nothing recorded for STALL_AFTER: the member may be hung (its activity says
    # what it did last). Nothing rings when a member merely goes quiet: due_at reads again then.
    for member in roster:
        doing = activities[member.pk]
        if doing.stalls_at is not None:
            due.append(doing.stalls_at)
        if doing.state != Activity.STALLED:
            continue
        items.append(
            {
                "kind": "stalled",
                "member": member.name,
                "status": member.status,
                "reason": "stalled: its turn is open and nothing was recorded for "
                          f"{round(activity.stall_after())} s",
                "since": iso(doing.since),
                "seconds": round((now - doing.since).total_seconds(), 1),
                "error": doing.detail or "",
            }
        )

    for prompt in prompts:
        if prompt.created_at + after > now:
            due.append(prompt.created_at + after)
            continue
        items.append(
            {
                "kind": "prompt",
                "prompt_id": prompt.id,
                "member": prompt.target.name,
                "author": prompt.author.get_username(),
                "since": iso(prompt.created_at),
                "seconds": round((now - prompt.created_at).total_seconds(), 1),
                "error": "",
            }
        )
    budget = usage.budget_of(team_id=team.pk)
    if budget.exhausted:
        # Nothing starts a turn in the team: it heads the list, whatever waits behind it.
        spent = MemberUsage.objects.filter(member__team=team).order_by("-updated_at").values_list("updated_at", flat=True)
        since = spent.first() or now
        items.append(
            {
                "kind": "budget",
                "tokens": budget.tokens,
                "used": budget.used,
                "since": iso(since),
                "seconds": round((now - since).total_seconds(), 1),
                "error": usage.exhausted_text(budget),
            }
        )
    items.sort(key=lambda i: (i["kind"] != "budget", -i["seconds"]))
    return {
        "threshold": threshold(),
        "count": len(items),
        "items": items[:ITEM_WINDOW],
        "due_at": iso(min(due)) if due else None,
    }


def teams_attention_counts(*, team_ids: list[int]) -> dict[int, int]:
    """For the team list: per team, messages stuck past the threshold, prompts waiting past it,
    failed members and a used-up token budget (an unreachable or a stalled member is shown on the team page only:
    telling it needs the team's hosts and pending work, or its members' histories, more than a list of teams reads)."""
    now = timezone.now()
    stale = now - timedelta(seconds=threshold())
    counts = dict.fromkeys(team_ids, 0)
    # The pending few through the (state, queued_at) index (ordered by state first, as
    # recovery.messages_recover reads them), counted here: by team, SQLite walked every old message.
    pending = (
        TeamMessage.objects.filter(team_id__in=team_ids, state__in=PENDING_STATES)
        .order_by("state", "queued_at")
        .values_list("team_id", "state", "queued_at", "accepted_at")[:PENDING_READ * 10]
    )
    for team_id, state, queued_at, accepted_at in pending:
        since = accepted_at if state == MessageState.ACCEPTED and accepted_at else queued_at
        if since < stale:
            counts[team_id] += 1
    failed = Member.objects.filter(team_id__in=team_ids, phase=Phase.FAILED).values("team_id").annotate(n=Count("pk"))
    prompts = (
        HumanPrompt.objects.filter(team_id__in=team_ids, state=PromptState.QUEUED, created_at__lt=stale)
        .values("team_id")
        .annotate(n=Count("pk"))
    )
    for rows in (failed, prompts):
        for row in rows:
            counts[row["team_id"]] += row["n"]
    for team_id in usage.teams_exhausted(team_ids=team_ids):
        counts[team_id] += 1  # the budget item the team page heads its list with
    return counts
