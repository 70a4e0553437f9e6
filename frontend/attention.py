"""Needs attention: what an operator should look at first (docs/dashboard.md, "Needs attention").

Five kinds of item, each with how long it has been so, the last real error and
what can be done:

- ``ask``: a member's ``ask_human`` waiting for a person's answer (mailbox/members/asks.py), from
  the moment it is asked. Asks head the list, oldest first: someone is waiting on a person;
- ``message``: queued or accepted for longer than ``ATTENTION_AFTER`` seconds
  (default ``REDELIVER_AFTER``), counted from when it entered that state;
- ``member``: failed to start, or unreachable: no session, no host connected to
  start it, and work (a message, a prompt) waiting for it past the threshold;
- ``prompt``: a human prompt still queued after the threshold;
- ``stalled``: a member whose turn is open with no history entry for
  ``STEERBOARD_STALL_AFTER`` seconds (its activity, mailbox/members/activity.py), with its last
  entry and that entry's age;
- ``budget``: the team's token budget is used up (mailbox/members/usage.py): no new turn starts
  until an operator raises it. It heads the list.

The team list shows the same count for each team (``teams_attention_counts``: the
same rule, ``member_reason`` for members, read for all the listed teams at once).

Reads are bounded: the team's pending messages (at most the mailbox limit per
target, read through the (state, queued_at) index), its queued prompts, its roster
and its members' activity (one read, mailbox/members/activity.py; the snapshot hands over
what it read).
"""
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from mailbox import selectors as mailbox_selectors
from mailbox.engine import budget, delivery
from mailbox.members import activity
from frontend.markdown import markdown_html
from mailbox.models import (
    PENDING_STATES, UNDELIVERED, AskState, HostPresence, HumanAsk, HumanPrompt, MemberUsage, MessageState, PromptState,
    TeamMessage,
)
from teams.models import Activity, Member, Phase, SessionState, Team, status_of
from teams.wire_format import iso

ITEM_WINDOW = 50  # items shown; the count is of all
PENDING_READ = 1000  # pending messages of a team read at most (9 members, the Lead and 8 teammates, x 64 by default)


def threshold() -> float:
    return float(settings.STEERBOARD.get("ATTENTION_AFTER") or settings.STEERBOARD["REDELIVER_AFTER"])


def message_since(message: TeamMessage) -> datetime:
    """When a pending message entered its state: what its time in Needs attention counts from."""
    if message.state == MessageState.ACCEPTED and message.accepted_at:
        return message.accepted_at
    return message.queued_at


def message_stuck(message: TeamMessage, *, now: datetime | None = None) -> bool:
    """Whether an operator's retry is offered for this message: it is pending and either
    past the threshold in its state (a Needs attention item), or queued with a reason
    (``last_error``: no session and no host, a failed admission). A message in its
    normal second or two in ``accepted`` is not stuck."""
    if message.state not in PENDING_STATES:
        return False
    if message.state == MessageState.QUEUED and message.last_error:
        return True
    return message_since(message) + timedelta(seconds=threshold()) <= (now or timezone.now())


def member_reason(*, phase: str, status: str, waited_for: bool, has_host: bool) -> str:
    """Why a member needs attention ("" if it does not): the one rule the team page
    lists and the team list counts. Unreachable: no session, no host connected to
    start one, and work (a message, a prompt) that has waited for it past the threshold."""
    if phase == Phase.FAILED:
        return "failed to start"
    if waited_for and delivery.target_waits(status=status, has_host=has_host):
        return "unreachable: no session and no host connected to start it"
    return ""


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
        TeamMessage.objects.filter(UNDELIVERED, team=team, state__in=PENDING_STATES).order_by(
            "state", "queued_at"
        )[:PENDING_READ]
    )
    pending.sort(key=lambda m: m.queued_at)
    for m in pending:
        m.sender, m.target = by_id[m.sender_id], by_id[m.target_id]
        since = message_since(m)
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
    # Whose reason needs to know of a host (a failed member's does not).
    no_session = [
        m for m in roster if m.phase != Phase.FAILED and m.status in delivery.SESSIONLESS and m.pk in waiting_for
    ]
    has_host = bool(no_session) and HostPresence.objects.filter(team=team).exists()
    failed = [m for m in roster if m.phase == Phase.FAILED]
    errors = activity.start_failures(team_id=team.pk) if failed else {}
    for member in roster:
        reason = member_reason(phase=member.phase, status=member.status, waited_for=member.pk in waiting_for,
                               has_host=has_host)
        if not reason:
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
    used_up = budget.budget_of(team_id=team.pk)
    if used_up.exhausted:
        # Nothing starts a turn in the team: it heads the list, whatever waits behind it.
        spent = MemberUsage.objects.filter(member__team=team).order_by("-updated_at").values_list("updated_at", flat=True)
        since = spent.first() or now
        items.append(
            {
                "kind": "budget",
                "tokens": used_up.tokens,
                "used": used_up.used,
                "since": iso(since),
                "seconds": round((now - since).total_seconds(), 1),
                "error": budget.exhausted_text(used_up),
            }
        )
    for ask in mailbox_selectors.asks_of(team=team, state=AskState.PENDING, limit=ITEM_WINDOW):
        items.append(
            {
                "kind": "ask",
                "ask_id": ask.id,
                "member": ask.member.name,
                "ask_kind": ask.kind,
                "question": ask.question,
                "options": list(ask.options or []),
                "context_html": markdown_html(ask.context) if ask.context else "",
                "expires_at": iso(ask.expires_at) if ask.expires_at else None,
                "since": iso(ask.created_at),
                "seconds": round((now - ask.created_at).total_seconds(), 1),
                "error": "",
            }
        )
    # Asks first (a member waits on a person), oldest first; then a used-up budget; then the rest.
    items.sort(key=lambda i: ({"ask": 0, "budget": 1}.get(i["kind"], 2), -i["seconds"]))
    return {
        "threshold": threshold(),
        "count": len(items),
        "items": items[:ITEM_WINDOW],
        "due_at": iso(min(due)) if due else None,
    }


def teams_attention_counts(*, team_ids: list[int]) -> dict[int, int]:
    """For the team list: per team, the number the team page's list counts (messages stuck
    past the threshold, prompts waiting past it, failed or unreachable members
    (``member_reason``), stalled members, pending asks, a used-up token budget), read for
    all the teams at once."""
    now = timezone.now()
    stale = now - timedelta(seconds=threshold())  # what entered its state by then has waited past it
    counts = dict.fromkeys(team_ids, 0)
    waiting_for: set[int] = set()  # members some work has waited for past the threshold
    # The pending few through the (state, queued_at) index (ordered by state first, as
    # recovery.messages_recover reads them), counted here: by team, SQLite walked every old message.
    pending = (
        TeamMessage.objects.filter(UNDELIVERED, team_id__in=team_ids, state__in=PENDING_STATES)
        .order_by("state", "queued_at")
        .values_list("team_id", "target_id", "state", "queued_at", "accepted_at")[:PENDING_READ * 10]
    )
    for team_id, target_id, state, queued_at, accepted_at in pending:
        since = accepted_at if state == MessageState.ACCEPTED and accepted_at else queued_at
        if since <= stale:
            counts[team_id] += 1
        if queued_at <= stale:
            waiting_for.add(target_id)
    prompts = HumanPrompt.objects.filter(team_id__in=team_ids, state=PromptState.QUEUED, created_at__lte=stale)
    for team_id, target_id in prompts.values_list("team_id", "target_id"):
        counts[team_id] += 1
        waiting_for.add(target_id)
    members = list(
        Member.objects.filter(team_id__in=team_ids)
        .filter(Q(phase=Phase.FAILED) | Q(pk__in=waiting_for))
        .values_list("team_id", "pk", "phase", "session_state")
    )
    hosted = set()
    if members:
        hosts = HostPresence.objects.filter(team_id__in={m[0] for m in members})
        hosted = set(hosts.values_list("team_id", flat=True).distinct())
    for team_id, pk, phase, session_state in members:
        if member_reason(phase=phase, status=status_of(phase, session_state), waited_for=pk in waiting_for, has_host=team_id in hosted):
            counts[team_id] += 1
    # Stalled: only a member with a turn open can be; its activity reads its latest entry (one query).
    running = list(Member.objects.filter(team_id__in=team_ids, session_state=SessionState.RUNNING,
                                         phase=Phase.ACTIVE))
    team_of = {m.pk: m.team_id for m in running}
    for member_id, doing in activity.members_activity(running, now=now).items():
        if doing.state == Activity.STALLED:
            counts[team_of[member_id]] += 1
    asks = HumanAsk.objects.filter(team_id__in=team_ids, state=AskState.PENDING).values("team_id").annotate(n=Count("pk"))
    for row in asks:
        counts[row["team_id"]] += row["n"]  # the asks the team page heads its list with
    for team_id in budget.teams_exhausted(team_ids=team_ids):
        counts[team_id] += 1  # the budget item the team page heads its list with
    return counts
