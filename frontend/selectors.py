"""Reads for the dashboard: the team snapshot the page renders, and the team overview.

Every read is windowed so a page load costs a bounded number of rows however
many messages, entries or prompts a team has: per target the pending messages
(at most the mailbox limit) and the newest delivered ones, per member the newest
history entries, the first page of tasks. Counts are aggregates. Older rows are
reached page by page (``frontend.console_views.team_messages``, the operator API).
"""
import json

from django.contrib.auth import get_user_model
from django.db.models import Count, Max, Q
from django.utils import timezone

from steerboard_protocol.turns import HistoryTurns, named_turn
from frontend import attention
from frontend.markdown import markdown_html
from mailbox import selectors as mailbox_selectors
from mailbox.plumbing import db
from mailbox.engine import budget
from mailbox.members import activity, usage
from mailbox.models import (
    COUNTED_STATES, UNDELIVERED, AskState, EntryKind, HistoryEntry, HumanAsk, HumanPrompt, MessageKind, MessageState,
    PromptState, TeamMessage,
)
from teams import selectors as team_selectors
from teams.models import Member, Status, Task, TaskStatus, Team
from teams.wire_format import iso

PENDING_WINDOW = 30  # queued + accepted shown per target (the mailbox holds at most 64)
DELIVERED_WINDOW = 10  # delivered shown per target
LATENCY_WINDOW = 40  # delivered messages per target drawn in the latency pictures
HISTORY_WINDOW = 80  # newest history entries per member for the timeline
PROMPT_WINDOW = 50  # undone human prompts per team
TASK_WINDOW = 100
TEAM_LIST_WINDOW = 100
ENTRY_TEXT_LIMIT = 300



def message_card(message: TeamMessage) -> dict:
    out = mailbox_selectors.message_out(message)
    content = out.pop("content")
    out["html"] = markdown_html(content)
    out["bytes"] = len(content.encode("utf-8"))
    out["stuck"] = attention.message_stuck(message)  # retry is offered on stuck cards only
    return out


def _latency_point(message: TeamMessage) -> dict | None:
    if not message.delivered_at:
        return None
    return {
        "message_id": message.id,
        "target": message.target.name,
        "delivered_at": iso(message.delivered_at),
        "seconds": round(max((message.delivered_at - message.queued_at).total_seconds(), 0.0), 3),
    }


def _text_of(kind: str, data: dict) -> str:
    """A one-line summary of an entry, whatever optional fields its session put in it."""
    tool = data.get("tool") or data.get("name")
    if kind == EntryKind.TOOL_CALL:
        args = data.get("arguments", data.get("input", data.get("args")))
        return f"{tool or '?'}({_short(args) if args is not None else ''})"
    if kind == EntryKind.TOOL_RESULT:
        if data.get("error") is not None:
            return f"{tool or ''} ✗ {_short(data['error'])}".strip()
        outcome = data.get("result", data.get("output", data.get("text")))
        return f"{tool or ''} → {_short(outcome)}".strip() if outcome is not None else (tool or "")
    if kind in (EntryKind.TURN_START, EntryKind.TURN_END):
        why = data.get("cause") or data.get("reason") or data.get("text")
        return why if isinstance(why, str) else ""
    for key in ("text", "content", "message"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:119] + "…"


def entry_view(row: HistoryEntry, sources: "EntrySources") -> dict:
    """One entry as the timeline shows it. Who sent a steered message and who wrote a
    prompt come from the server's records (``sources``), never from the entry: a
    session reports its entries itself, so ``source.sender`` and ``author`` in them
    are only its claim. A reference that is no message or prompt to this member is
    shown ``verified: false`` with no sender or author."""
    data = row.data if isinstance(row.data, dict) else {}
    text = _text_of(row.kind, data)
    if len(text) > ENTRY_TEXT_LIMIT:
        text = text[: ENTRY_TEXT_LIMIT - 1] + "…"
    out = {"id": row.entry_id, "kind": row.kind, "text": text, "at": iso(row.created_at)}
    if row.message_id:
        out["message_id"] = row.message_id
        found = sources.messages.get((row.member_id, row.message_id))
        out["verified"] = found is not None
        out["sender"] = found[0] if found else None
        if found:
            out["message_kind"] = found[1]
            ask = sources.answers.get(row.message_id)
            if ask is not None:  # a person's answer to this member's ask_human, from the ask's row
                out["ask"] = ask
    if row.kind == EntryKind.PROMPT:
        if row.prompt_id:
            out["prompt_id"] = row.prompt_id
        author = sources.prompts.get((row.member_id, row.prompt_id)) if row.prompt_id else None
        out["verified"] = author is not None
        if author is not None:
            out["author"] = author
        a2a_task = sources.a2a_tasks.get((row.member_id, row.prompt_id)) if row.prompt_id else None
        if a2a_task:  # the prompt came over A2A (delegation/): its task id
            out["a2a_task"] = a2a_task
    return out


class EntrySources:
    """The messages and prompts a batch of history entries name, read in two queries
    (whatever the number of entries or members), keyed by (member id, id): only a
    message or prompt addressed to that member counts."""

    def __init__(self, rows: list[HistoryEntry]):
        message_ids = {r.message_id for r in rows if r.message_id}
        prompt_ids = {r.prompt_id for r in rows if r.prompt_id and r.kind == EntryKind.PROMPT}
        self.messages: dict[tuple[int, str], tuple[str, str]] = {}
        self.prompts: dict[tuple[int, str], str] = {}
        self.a2a_tasks: dict[tuple[int, str], str] = {}
        self.answers: dict[str, dict] = {}  # answer message id -> the ask it answers
        if message_ids:
            found = TeamMessage.objects.filter(pk__in=message_ids).values_list("pk", "target_id", "sender__name", "kind")
            self.messages = {(target, pk): (sender, kind) for pk, target, sender, kind in found}
            answers = [pk for (_, pk), (_, kind) in self.messages.items() if kind == MessageKind.HUMAN_ANSWER]
            if answers:
                asks = HumanAsk.objects.filter(answer_message_id__in=answers).values_list(
                    "answer_message_id", "id", "question", "decision", "answered_by"
                )
                self.answers = {
                    mid: {"id": pk, "question": question, "decision": decision or None, "answered_by": by or None}
                    for mid, pk, question, decision, by in asks
                }
        if prompt_ids:
            username = f"author__{get_user_model().USERNAME_FIELD}"
            found = HumanPrompt.objects.filter(pk__in=prompt_ids).values_list("pk", "target_id", username, "a2a_task__id")
            self.prompts = {(target, pk): author for pk, target, author, _ in found}
            self.a2a_tasks = {(target, pk): task for pk, target, _, task in found if task}


def _step_of(data: dict, default: int) -> int:
    step = data.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else default


def timeline_build(
    rows: list[HistoryEntry], *, status: str, sources: EntrySources | None = None
) -> tuple[list[dict], dict | None]:
    """Group history entries (oldest first) into turns and steps; return (turns, current turn).

    ``sources``: the messages and prompts the entries name, when the caller read
    them for several members at once; otherwise they are read here.

    Which turn each entry is in is the one rule of sdk/steerboard_protocol/turns.py;
    entries carry ``step`` by convention. A turn that holds a
    ``prompt`` entry is a prompt turn: the Queue adapter starts each one on its own.
    """
    if sources is None:
        sources = EntrySources(rows)
    turns: list[dict] = []
    current: dict | None = None
    placing = HistoryTurns()  # the one turn rule (sdk/steerboard_protocol/turns.py)
    reported: list[tuple[str, dict]] = []  # (turn id, entry data) of the entries that report usage
    for row in rows:
        data = row.data if isinstance(row.data, dict) else {}
        placed = placing.place(row.kind, named_turn(data), row.entry_id)
        if "usage" in data:
            reported.append((placed.turn_id, data))
        if placed.opens:  # the first entry always opens one
            current = {
                "turn_id": placed.turn_id,
                "kind": "turn",
                "prompt_id": None,
                "started_at": iso(row.created_at),
                "ended": False,
                "partial": not turns and row.kind not in (EntryKind.TURN_START, EntryKind.PROMPT),
                "steps": [],
                "_last_step": 0,
            }
            turns.append(current)
        step = _step_of(data, current["_last_step"])
        if row.kind != EntryKind.USER_MESSAGE:
            # A steered message reports the step it entered; other entries advance the turn.
            current["_last_step"] = max(current["_last_step"], step)
        bucket = next((s for s in current["steps"] if s["step"] == step), None)
        if bucket is None:
            bucket = {"step": step, "entries": []}
            current["steps"].append(bucket)
            current["steps"].sort(key=lambda s: s["step"])
        bucket["entries"].append(entry_view(row, sources))
        if row.kind == EntryKind.PROMPT:
            current["kind"] = "prompt"
            current["prompt_id"] = row.prompt_id
        if row.kind == EntryKind.TURN_END:
            current["ended"] = True
    used = usage.turn_usage(reported)
    for turn in turns:
        del turn["_last_step"]
        turn["step_count"] = max((s["step"] for s in turn["steps"]), default=0) + 1
        turn["usage"] = used.get(turn["turn_id"])  # None: its entries reported none
    running = None
    if status == Status.RUNNING and turns and not turns[-1]["ended"]:
        last = turns[-1]
        running = {
            "turn_id": last["turn_id"],
            "kind": last["kind"],
            "step": last["steps"][-1]["step"] if last["steps"] else 0,
            "started_at": last["started_at"],
        }
    return turns, running


def _messages_for(member: Member) -> tuple[dict[str, list[TeamMessage]], list[dict]]:
    pending = mailbox_selectors.pending_of(target=member, limit=PENDING_WINDOW)
    # Not joined to the target (we have it): with that join SQLite's planner left
    # the (target, state, seq) index for a walk of the whole inbox.
    delivered = list(
        TeamMessage.objects.filter(target=member, state=MessageState.DELIVERED)
        .select_related("sender")
        .order_by("-seq")[:LATENCY_WINDOW]
    )
    for message in delivered:
        message.target = member
    by_state = {
        MessageState.QUEUED.value: [m for m in pending if m.state == MessageState.QUEUED],
        MessageState.ACCEPTED.value: [m for m in pending if m.state == MessageState.ACCEPTED],
        MessageState.DELIVERED.value: delivered[:DELIVERED_WINDOW],
    }
    latency = [p for p in (_latency_point(m) for m in reversed(delivered)) if p]
    return by_state, latency


def team_snapshot(*, team: Team) -> dict:
    """Everything the team page shows, read from the database in one bounded pass
    that sees one moment: a message delivered meanwhile is in one column, not two."""
    with db.read_snapshot():
        snapshot = _team_snapshot(team=team)
    # The messages' Markdown is CPU, not reads: rendered after the read transaction,
    # which then stays short (a long one holds back SQLite's WAL checkpoints and
    # PostgreSQL's vacuum).
    for lane in snapshot["members"]:
        lane["messages"] = {state: [message_card(m) for m in listed] for state, listed in lane["messages"].items()}
    return snapshot


def _team_snapshot(*, team: Team) -> dict:
    counts = mailbox_selectors.member_counts(team=team)
    prompts = list(
        HumanPrompt.objects.filter(team=team, state__in=[PromptState.QUEUED, PromptState.STARTED])
        .select_related("author", "target")
        .order_by("created_at")[:PROMPT_WINDOW]
    )
    roster = list(team_selectors.member_list(team_id=team.pk))
    asks = mailbox_selectors.asks_of(team=team, state=AskState.PENDING, limit=PROMPT_WINDOW)
    doing = activity.members_activity(roster)
    per_member = usage.team_usage(team_id=team.pk)
    histories = {}
    for member in roster:
        rows = list(HistoryEntry.objects.filter(member=member).order_by("-id")[:HISTORY_WINDOW])
        rows.reverse()
        histories[member.pk] = rows
    # Who sent / wrote what the entries name: two reads for the whole team, not one per entry.
    sources = EntrySources([row for rows in histories.values() for row in rows])
    members = []
    for member in roster:
        status = member.status
        messages, latency = _messages_for(member)
        rows = histories[member.pk]
        turns, current_turn = timeline_build(rows, status=status, sources=sources)
        members.append(
            {
                **team_selectors.member_out(member, activity=doing[member.pk].out()),
                "status_changed_at": iso(member.status_changed_at),
                "counts": counts.get(member.pk, {str(state): 0 for state in MessageState}),
                "usage": per_member.get(member.pk, usage.usage_out([])),
                "messages": messages,
                "latency": latency,
                "current_turn": current_turn,
                "timeline": turns,
                "timeline_partial": len(rows) == HISTORY_WINDOW,
                "prompts": [mailbox_selectors.prompt_out(p) for p in prompts if p.target_id == member.pk],
                # What the member waits for a person on (mailbox/members/asks.py), oldest first.
                "asks": [mailbox_selectors.ask_out(a) for a in asks if a.member_id == member.pk],
            }
        )
    tasks, next_cursor = team_selectors.task_list(team_id=team.pk, limit=TASK_WINDOW)
    return {
        "team": team.name,
        "generated_at": iso(timezone.now()),
        "attention": attention.team_attention(team=team, roster=roster, activities=doing),
        "window": {"pending": PENDING_WINDOW, "delivered": DELIVERED_WINDOW, "history": HISTORY_WINDOW},
        "members": members,
        "usage": usage.usage_total(per_member),
        "budget": budget.budget_of(team_id=team.pk).out(),
        "tasks": [
            {**out, "blocking": team_selectors.task_blocking(task)}
            for task, out in zip(tasks, team_selectors.tasks_out(tasks, team_id=team.pk), strict=True)
        ],
        "tasks_more": next_cursor is not None,
    }


def teams_overview(*, limit: int = TEAM_LIST_WINDOW) -> list[dict]:
    """The team list: per team its members' statuses, message counts by state and open tasks."""
    teams = list(Team.objects.order_by("name")[:limit])
    ids = [t.pk for t in teams]
    members: dict[int, list[dict]] = {i: [] for i in ids}
    sent = dict.fromkeys(ids, 0)
    for member in Member.objects.filter(team_id__in=ids).order_by("id"):
        members[member.team_id].append({"name": member.name, "role": member.role, "status": member.status})
        sent[member.team_id] += mailbox_selectors.sent_count(member.next_seq)
    states = {i: {str(state): 0 for state in MessageState} for i in ids}
    counted = TeamMessage.objects.filter(UNDELIVERED, team_id__in=ids, state__in=COUNTED_STATES)
    for row in counted.values("team_id", "state").annotate(n=Count("pk")):
        states[row["team_id"]][row["state"]] = row["n"]
    for team_id, counts in states.items():
        counts[MessageState.DELIVERED.value] = mailbox_selectors.delivered_count(sent=sent[team_id], counted=counts)
    open_tasks = dict(
        Task.objects.filter(team_id__in=ids)
        .filter(Q(status=TaskStatus.PENDING) | Q(status=TaskStatus.IN_PROGRESS))
        .values("team_id")
        .annotate(n=Count("pk"))
        .values_list("team_id", "n")
    )
    needs_attention = attention.teams_attention_counts(team_ids=ids)
    return [
        {
            "team": t.name,
            "created_at": iso(t.created_at),
            "members": members[t.pk],
            "messages": states[t.pk],
            "open_tasks": open_tasks.get(t.pk, 0),
            "attention": needs_attention[t.pk],
        }
        for t in teams
    ]


def team_messages_page(
    *, team: Team, cursor: str | None, filters: dict, limit: int = 50
) -> tuple[list[dict], str | None]:
    """A page of the team messages page: the operator API's filtered list, rendered as the team page's cards."""
    page, next_cursor = mailbox_selectors.message_list(team=team, cursor=cursor, limit=limit, **filters)
    return [message_card(m) for m in page], next_cursor


# --- the dashboard sockets' reads (frontend/consumers.py) ------------------------------------------
def dashboard_team_ids(name: str | None) -> list[int]:
    """The teams a dashboard socket follows: the one named, or the team list's window."""
    if name is not None:
        return list(Team.objects.filter(name=name).values_list("pk", flat=True))
    return list(Team.objects.order_by("name").values_list("pk", flat=True)[:TEAM_LIST_WINDOW])


def teams_mark() -> tuple[int, int | None]:
    """How many teams there are and the highest id: it changes when a team is made or removed
    (one index-only read)."""
    found = Team.objects.aggregate(n=Count("pk"), top=Max("pk"))
    return found["n"], found["top"]


def team_list_read() -> tuple[list[int], tuple[int, int | None]]:
    """A team-list socket's teams, and the mark it saw them at."""
    return dashboard_team_ids(None), teams_mark()
