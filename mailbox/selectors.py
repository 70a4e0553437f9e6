"""Reads of the mailbox for operators and the dashboard; every list is keyset-paginated."""
from datetime import datetime

from django.db.models import Count, F, Max, OuterRef, Q, Subquery

from mailbox.models import (
    COUNTED_STATES, PENDING_STATES, UNDELIVERED, AskState, HistoryEntry, HumanAsk, HumanPrompt, MessageState, PromptState,
    TeamMessage,
)
from mailbox.text_match import ContainsAnyCase
from teams import selectors as team_selectors
from teams.errors import ErrorCode, TeamError
from teams.models import Member, SessionState, Task, Team
from teams.wire_format import cursor_decode, cursor_encode, cursor_refused, iso



def message_out(message: TeamMessage) -> dict:
    return {
        "id": message.id,
        "sender": message.sender.name,
        "target": message.target.name,
        "content": message.content,
        "seq": message.seq,
        "thread_id": message.thread_id or message.id,
        "reply_to": message.reply_to or None,
        "kind": message.kind,
        "state": message.state,
        "queued_at": iso(message.queued_at),
        "accepted_at": iso(message.accepted_at),
        "delivered_at": iso(message.delivered_at),
        "cancelled_at": iso(message.cancelled_at),
        "attempts": message.attempts,
        "failures": message.failures,
        "repushes": message.repushes,
        "last_error": message.last_error,
    }


def pending_of(
    *, target: Member, states=PENDING_STATES, limit: int | None = None
) -> list[TeamMessage]:
    """A target's undelivered messages (of ``states``) in seq order, with their senders.

    One query per state, merged here: each reads only its few rows from the
    (target, state, seq) index. A single ``state IN (...) ORDER BY seq`` let
    SQLite walk the target's whole inbox through the (target, seq) index
    instead (its statistics see one state per target: nearly all delivered),
    about 100 ms per query at 10^5 messages per target."""
    rows: list[TeamMessage] = []
    for state in states:
        query = (
            TeamMessage.objects.filter(UNDELIVERED, target_id=target.pk, state=state).select_related("sender").order_by("seq")
        )
        rows.extend(query[:limit] if limit else query)
    rows.sort(key=lambda m: m.seq)
    for row in rows:
        row.target = target
    return rows[:limit] if limit else rows


def no_messages() -> dict[str, int]:
    return {str(state): 0 for state in MessageState}


def member_counts(*, team: Team) -> dict[int, dict[str, int]]:
    """Per target: how many messages are in each state.

    Every state but delivered is counted (the pending few per target, by the (target,
    state, seq) index; a new state is counted as soon as it is a MessageState); delivered
    is what is left of all that were ever sent (``delivered_count``), so the cost stays
    the same with a million stored messages as with a thousand."""
    totals = [(pk, sent_count(next_seq)) for pk, next_seq in Member.objects.filter(team=team).values_list("pk", "next_seq")]
    # By target (the (target, state, seq) index), not by team: only the counted few are read.
    rows = (
        TeamMessage.objects.filter(UNDELIVERED, target_id__in=[pk for pk, _ in totals], state__in=COUNTED_STATES)
        .values("target_id", "state")
        .annotate(n=Count("pk"))
    )
    counted: dict[int, dict[str, int]] = {}
    for r in rows:
        counted.setdefault(r["target_id"], no_messages())[r["state"]] = r["n"]
    counts = {}
    for member_id, total in totals:
        mine = counted.get(member_id, no_messages())
        counts[member_id] = {**mine, MessageState.DELIVERED.value: delivered_count(sent=total, counted=mine)}
    return counts


def sent_count(next_seq: int) -> int:
    """How many messages a target was ever sent: ``seq`` is dense per target (handed out
    one by one in the enqueue transaction; messages are never deleted), so it is the
    member's next seq less one, read without touching the messages."""
    return next_seq - 1


def delivered_count(*, sent: int, counted: dict[str, int]) -> int:
    """Delivered = sent less every other state, each counted: no scan of the delivered backlog."""
    return max(0, sent - sum(counted.get(state, 0) for state in COUNTED_STATES))


def _cursor_encode(message: TeamMessage) -> str:
    return cursor_encode(f"{message.queued_at.isoformat()}|{message.pk}")


def _cursor_decode(cursor: str) -> tuple[datetime, str]:
    stamp, _, pk = cursor_decode(cursor).partition("|")
    try:
        return datetime.fromisoformat(stamp), pk
    except ValueError:
        raise cursor_refused()


def messages_matching(
    *, team: Team, roster: dict[int, Member], target: str | None = None, state: str | None = None,
    sender: str | None = None, thread: str | None = None, q: str | None = None, since: datetime | None = None,
    until: datetime | None = None, pending: bool = False,
):
    """A team's messages that match every filter given (the operator's search; unordered).

    ``roster`` is the team's members by id (``roster_of``): names are resolved
    there, so the query joins nothing and each filter rides an index. A pending
    state (or ``pending``: both) reads the (state, queued_at) index, the few
    undelivered rows (order by state first when both); sender (sender, -queued_at); thread the
    partial index of replies (a root by its id); otherwise the newest-first walk
    of (team, -queued_at), on which target, text and time bounds are checked, so
    a first page stops at its last match. (A join to the members let SQLite's
    planner scan the roster and sort a member's whole history instead.)"""
    ids = {m.name: pk for pk, m in roster.items()}
    if state and state not in MessageState.values:
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"state is one of {', '.join(MessageState.values)}.")
    if (target and target not in ids) or (sender and sender not in ids):
        return TeamMessage.objects.none()
    if pending or state in PENDING_STATES:
        states = [state] if state else list(PENDING_STATES)
        if state and state not in PENDING_STATES:
            return TeamMessage.objects.none()
        qs = TeamMessage.objects.filter(UNDELIVERED, team=team, state__in=states)
        if target:
            qs = qs.filter(target_id=ids[target])
    else:
        qs = TeamMessage.objects.filter(team=team)
        if target:
            qs = qs.filter(target_id=ids[target])
        if state:
            qs = qs.filter(state=state)
        if state == MessageState.CANCELLED:  # the few cancelled ones, through their partial index
            qs = qs.filter(cancelled_at__isnull=False)
    if sender:
        qs = qs.filter(sender_id=ids[sender])
    if thread:
        qs = qs.filter(Q(thread_id=thread) | Q(pk=thread))
    if q:
        qs = qs.filter(ContainsAnyCase(F("content"), q))  # every letter's case, on both databases
    if since:
        qs = qs.filter(queued_at__gte=since)
    if until:
        qs = qs.filter(queued_at__lt=until)
    return qs


def roster_of(*, team: Team) -> dict[int, Member]:
    return {m.pk: m for m in Member.objects.filter(team=team)}


def _with_members(messages: list[TeamMessage], roster: dict[int, Member]) -> list[TeamMessage]:
    for message in messages:
        message.sender, message.target = roster[message.sender_id], roster[message.target_id]
    return messages


def message_list(
    *, team: Team, target: str | None = None, state: str | None = None, cursor: str | None = None, limit: int = 50,
    **filters,
) -> tuple[list[TeamMessage], str | None]:
    """Newest first, a keyset page; ``filters`` as messages_matching. Two queries: the roster, the page."""
    roster = roster_of(team=team)
    qs = messages_matching(team=team, roster=roster, target=target, state=state, **filters)
    if cursor:
        stamp, pk = _cursor_decode(cursor)
        qs = qs.filter(Q(queued_at__lt=stamp) | Q(queued_at=stamp, pk__lt=pk))
    page = _with_members(list(qs.order_by("-queued_at", "-pk")[: limit + 1]), roster)
    next_cursor = _cursor_encode(page[limit - 1]) if len(page) > limit else None
    return page[:limit], next_cursor


RETRY_WINDOW = 1000  # undelivered messages one team retry takes at most (the mailbox holds 64 per target)


def messages_undelivered(*, team: Team, **filters) -> list[TeamMessage]:
    """The queued and accepted messages that match ``filters`` (a team retry's selection), oldest first."""
    roster = roster_of(team=team)
    qs = messages_matching(team=team, roster=roster, pending=True, **filters)
    # Ordered by state first: SQLite then walks the (state, queued_at) index (recovery.messages_recover's way).
    rows = list(qs.order_by("state", "queued_at")[:RETRY_WINDOW])
    rows.sort(key=lambda m: m.queued_at)
    return _with_members(rows, roster)


def message_get(*, team: Team, message_id: str) -> TeamMessage:
    message = TeamMessage.objects.select_related("sender", "target").filter(team=team, pk=message_id).first()
    if message is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No message {message_id!r} in team {team.name}.")
    return message


def prompts_latest(*, team: Team, limit: int = 100) -> list[HumanPrompt]:
    """A team's latest human prompts, newest first, with their targets and authors."""
    return list(
        HumanPrompt.objects.filter(team=team).select_related("target", "author").order_by("-created_at")[:limit]
    )


def prompt_out(prompt: HumanPrompt) -> dict:
    return {
        "id": prompt.id,
        "target": prompt.target.name,
        "author": prompt.author.get_username(),
        "content": prompt.content,
        "state": prompt.state,
        "created_at": iso(prompt.created_at),
        "started_at": iso(prompt.started_at),
        "completed_at": iso(prompt.completed_at),
    }


def inbox_page(*, member, after_seq: int = 0, limit: int = 50) -> tuple[list[TeamMessage], int | None]:
    """A member's own messages in seq order after a cursor, for sessions that poll.

    Seqs are assigned under the target's row lock, so a lower seq never commits
    after a higher one has been read: a cursor never skips a message."""
    rows = list(
        TeamMessage.objects.filter(target=member, seq__gt=after_seq).select_related("sender", "target").order_by("seq")[
            : limit + 1
        ]
    )
    page = rows[:limit]
    return page, (page[-1].seq if len(rows) > limit else None)


def inbox_messages(*, member, ids: list[str]) -> list[TeamMessage]:
    """These messages of a member's inbox as they are now (an MCP inbox read, once it took them)."""
    return list(TeamMessage.objects.filter(target=member, id__in=ids).select_related("sender", "target"))


def wait_snapshot(member: Member) -> tuple[bool, tuple]:
    """For wait_agent: whether another member is active, and what it wakes on (the
    others' statuses, the caller's inbox and the task board)."""
    others = [m for m in team_selectors.member_list(team_id=member.team_id) if m.pk != member.pk]
    inbox = TeamMessage.objects.filter(target=member).aggregate(top=Max("seq"))["top"] or 0
    board = Task.objects.filter(team_id=member.team_id).aggregate(n=Count("id"), at=Max("updated_at"))
    statuses = tuple((m.name, m.status) for m in others)
    return any(map(team_selectors.member_is_active, others)), (statuses, inbox, board["n"], board["at"])


def members_awaiting_prompt(*, team_id: int | None = None) -> list[int]:
    """Members with no session that have a human prompt waiting: they need a host to resume them."""
    qs = HumanPrompt.objects.filter(state=PromptState.QUEUED, target__session_state=SessionState.INACTIVE)
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    return sorted(set(qs.values_list("target_id", flat=True)[:1000]))


def members_mid_turn(*, team_id: int) -> list[int]:
    """Members with no session whose history stops inside a turn (their session died in it).

    A host that connects resumes them, so the turn goes on without waiting for a message."""
    last_turn_mark = Subquery(
        HistoryEntry.objects.filter(member_id=OuterRef("pk"), kind__in=["turn_start", "turn_end"])
        .order_by("-id")
        .values("kind")[:1]
    )
    return list(
        Member.objects.filter(team_id=team_id, session_state=SessionState.INACTIVE, phase="active")
        .annotate(last_mark=last_turn_mark)
        .filter(last_mark="turn_start")
        .values_list("pk", flat=True)
    )


# --- ask_human's asks (mailbox/members/asks.py writes them) -------------------------------------------
def pending_asks_for(member: Member):
    """The asks of ``member`` waiting for a person, oldest first: the one query for "this
    member has a pending ask" (``.exists()``) and what it asks (``.first()``). An expired ask
    the sweeper has not reached yet still counts: it is answered, "expired", within a sweep."""
    return HumanAsk.objects.filter(member=member, state=AskState.PENDING).order_by("created_at", "id")


def pending_asks_by_member(member_ids) -> dict[int, list[HumanAsk]]:
    """``pending_asks_for`` of several members in one query: member id -> its pending asks, oldest first."""
    found: dict[int, list[HumanAsk]] = {}
    for ask in HumanAsk.objects.filter(member_id__in=list(member_ids), state=AskState.PENDING).order_by("created_at", "id"):
        found.setdefault(ask.member_id, []).append(ask)
    return found


def asks_of(*, team: Team, state: str | None = None, limit: int = 200) -> list[HumanAsk]:
    """A team's asks, oldest first (pending ones are what needs an answer), optionally in one state."""
    asks = HumanAsk.objects.filter(team=team).select_related("member")
    if state:
        asks = asks.filter(state=state)
    return list(asks.order_by("created_at", "id")[:limit])


def ask_get(*, team_id: int, ask_id: str) -> HumanAsk:
    found = HumanAsk.objects.filter(team_id=team_id, pk=ask_id).select_related("member").first()
    if found is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No ask {ask_id!r} on this team.")
    return found


def ask_out(ask: HumanAsk) -> dict:
    """An ask as the operator API and the dashboard show it (docs/protocol.md)."""
    return {
        "id": ask.id,
        "member": ask.member.name,
        "kind": ask.kind,
        "question": ask.question,
        "options": list(ask.options or []),
        "context": ask.context,
        "state": ask.state,
        "created_at": iso(ask.created_at),
        "expires_at": iso(ask.expires_at) if ask.expires_at else None,
        "answered_at": iso(ask.answered_at) if ask.answered_at else None,
        "decision": ask.decision or None,
        "answer": ask.answer or None,
        "comment": ask.comment or None,
        "answered_by": ask.answered_by or None,
        "message_id": ask.answer_message_id,
    }


def human_answer_of(message_id: str) -> dict:
    """What a ``human_answer`` message's steer frame carries besides the message: the ask it
    answers, the decision, the answer in words and who gave it (docs/protocol.md)."""
    ask = HumanAsk.objects.filter(answer_message_id=message_id).first()
    if ask is None:
        return {}
    return {
        "ask_id": ask.id,
        "decision": ask.decision or None,
        "answer": (ask.answer or ask.comment) or None,
        "answered_by": ask.answered_by or None,
    }
