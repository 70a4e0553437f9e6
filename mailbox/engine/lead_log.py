"""The Lead log: each team's append-only record of what happened, and its readers.

Every record is written by the Lead log (docs/delivery.md, "The Lead log"). It owns:

- what a message record holds: each kind's fields (``MESSAGE_FIELDS``) and one builder
  per kind (``queued_record``, ``accepted_record``, ...), used by every path that writes
  one;
- the SQL that appends records: the batch INSERT a writer batch flushes its records with
  (``rows_values``, ``rows_insert``; mailbox/engine/hot_sql.py's ``log_rows_flush``) and, on
  PostgreSQL, the INSERT clauses the send and entry statements append theirs with
  (``records_select``, ``records_from``);
- appending a record with the ORM in the caller's transaction, ringing the team's
  dashboards once it commits (``member_logged``, ``task_logged``, ``messages_logged``,
  ...), for the writes that are not the hot path's (admission, recovery, operators,
  the roster and the task board). The hot path's jobs ring the dashboards themselves
  after their batch commits.

The readers: ``message_trace`` (one message's history and where it is now, for the
trace page and ``GET /api/v1/teams/<team>/messages/<id>``).
"""
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction

from mailbox.plumbing import events
from mailbox.engine import history
from mailbox.models import HistoryEntry, LeadLogRecord, LogKind, MessageState, TeamMessage
from mailbox.plumbing import metrics
from teams.wire_format import iso

# Each message record kind's fields, in the order a record holds them.
MESSAGE_FIELDS: dict[str, tuple[str, ...]] = {
    LogKind.MESSAGE_QUEUED: ("sender", "target", "seq"),
    LogKind.MESSAGE_ACCEPTED: ("target", "seq", "target_status", "redelivery"),
    LogKind.MESSAGE_FAILED: ("target", "seq", "error", "waiting"),
    LogKind.MESSAGE_RETRIED: ("target", "seq", "state", "by"),
    LogKind.MESSAGE_DELIVERED: ("target", "seq"),
    LogKind.MESSAGE_CANCELLED: ("target", "seq", "state", "by"),
    # The message that carries a person's answer to an ask_human back to its asker (or the
    # ask's expiry) starts with this record: the ask, its question and the answer.
    LogKind.ASK_ANSWERED: ("ask_id", "member", "question", "decision", "answered_by"),
    LogKind.ASK_EXPIRED: ("ask_id", "member", "question", "decision", "answered_by"),
}


# --- a record's data ---------------------------------------------------------------------------
# Each builder's parameters are its kind's fields, in order (tests/mailbox/test_lead_log.py
# holds them to MESSAGE_FIELDS). The values are the record's own, or, for ``records_select``,
# the SQL expressions that compute them.
def _record(kind: str, *values) -> dict:
    return dict(zip(MESSAGE_FIELDS[kind], values, strict=True))


def queued_record(*, sender, target, seq) -> dict:
    """The message was stored, ``seq`` in its target's mailbox."""
    return _record(LogKind.MESSAGE_QUEUED, sender, target, seq)


def accepted_record(*, target, seq, target_status, redelivery) -> dict:
    """The message was pushed or its target asked for (``redelivery``: pushed again)."""
    return _record(LogKind.MESSAGE_ACCEPTED, target, seq, target_status, redelivery)


def failed_record(*, target, seq, error, waiting) -> dict:
    """An admission failed (``waiting``: the target has nothing to deliver to yet)."""
    return _record(LogKind.MESSAGE_FAILED, target, seq, error, waiting)


def retried_record(*, target, seq, state, by) -> dict:
    """An operator (``by``) asked for the message's admission again."""
    return _record(LogKind.MESSAGE_RETRIED, target, seq, state, by)


def delivered_record(*, target, seq) -> dict:
    """The target's history holds the message."""
    return _record(LogKind.MESSAGE_DELIVERED, target, seq)


def cancelled_record(*, target, seq, state, by) -> dict:
    """An operator (``by``) cancelled the message while it was ``state`` (queued or accepted)."""
    return _record(LogKind.MESSAGE_CANCELLED, target, seq, state, by)


def ask_answered_record(*, ask_id, member, question, decision, answered_by) -> dict:
    """A person (``answered_by``) answered ``member``'s ask; the message carries the answer."""
    return _record(LogKind.ASK_ANSWERED, ask_id, member, question, decision, answered_by)


def ask_expired_record(*, ask_id, member, question, decision, answered_by) -> dict:
    """Nobody answered ``member``'s ask in time; the message says so (decision ``expired``)."""
    return _record(LogKind.ASK_EXPIRED, ask_id, member, question, decision, answered_by)


# --- the SQL that appends records -----------------------------------------------------------------
_INSERT = f"INSERT INTO {LeadLogRecord._meta.db_table} (team_id, kind, message_id, data, created_at)"


def rows_values(json_value: str) -> tuple[str, str]:
    """The batch INSERT's head and one row's placeholders (team, kind, message, data, created
    at); ``json_value`` is the vendor's placeholder for a JSON text. hot_sql keeps the two
    with its statements, in the vendor's placeholder style, for ``rows_insert``."""
    return f"{_INSERT} VALUES ", f"(%s, %s, %s, {json_value}, %s)"


def rows_insert(head: str, row: str, rows: list[tuple], now) -> tuple[str, list]:
    """The statement and parameters that append ``rows`` ((team id, kind, message id, data as
    JSON text), in order) in one INSERT, all created ``now``; a record already there
    (``delivered`` is unique per message) is skipped."""
    params: list = []
    for team_id, kind, message_id, data in rows:
        params += [team_id, kind, message_id, data, now]
    return head + ", ".join([row] * len(rows)) + " ON CONFLICT DO NOTHING", params


def records_select(
    kind: str, data: dict[str, str], *, team: str, message: str, now: str, source: str, where: str = ""
) -> str:
    """PostgreSQL: a SELECT of one record of ``kind`` per row of ``source`` (a WITH clause),
    for ``records_from``. ``data``: a builder's record whose values are SQL expressions;
    the JSON keys are its kind's fields."""
    if tuple(data) != MESSAGE_FIELDS[kind]:
        raise ValueError(f"a {kind} record has the fields {MESSAGE_FIELDS[kind]}, not {tuple(data)}")
    fields = ", ".join(f"'{name}', {value}" for name, value in data.items())
    found = f"SELECT {team}, '{kind}', {message}, jsonb_build_object({fields}), {now} FROM {source}"
    return f"{found} WHERE {where}" if where else found


def records_from(*selects: str, skip_existing: bool = False) -> str:
    """PostgreSQL: the INSERT that appends the records ``selects`` make (a data-modifying
    WITH clause's body); ``skip_existing`` adds ON CONFLICT DO NOTHING."""
    return f"{_INSERT} " + " UNION ALL ".join(selects) + (" ON CONFLICT DO NOTHING" if skip_existing else "")

# The trace's name for each message record (``data-event`` on the trace page).
EVENT_KINDS = {
    LogKind.MESSAGE_QUEUED: "queued",
    LogKind.MESSAGE_ACCEPTED: "accepted",
    LogKind.MESSAGE_FAILED: "failed",
    LogKind.MESSAGE_RETRIED: "retried",
    LogKind.MESSAGE_DELIVERED: "delivered",
    LogKind.MESSAGE_CANCELLED: "cancelled",
    # A person's answer to an ask_human (mailbox/members/asks.py), or its expiry: the record names the
    # message that carries it back to the asker, with the question asked.
    LogKind.ASK_ANSWERED: "answered",
    LogKind.ASK_EXPIRED: "expired",
}


# --- writers ----------------------------------------------------------------------------------
def message_logged(*, message: TeamMessage, kind: str, data: dict, target: str) -> None:
    """One record of one message, and the doorbell naming it."""
    LeadLogRecord.objects.create(team_id=message.team_id, kind=kind, message=message, data=data)
    transaction.on_commit(lambda: metrics.records_logged(team_id=message.team_id, kind=kind))
    events.dashboard_notify(message.team_id, "message", message_id=message.id, target=target)


def messages_logged(
    *, team_id: int, kind: str, records: Iterable[tuple[str, dict]], target: str, name_messages: bool = True,
    first_accepted: tuple = (),
) -> None:
    """Records of several messages of one target in one INSERT (``records``: (message id, data)),
    and one doorbell for them all. ``first_accepted``: for ``accepted`` records, when the messages
    accepted for the first time were queued (the send-to-accepted latency, mailbox/plumbing/metrics.py)."""
    rows = [LeadLogRecord(team_id=team_id, kind=kind, message_id=mid, data=data) for mid, data in records]
    if rows:
        LeadLogRecord.objects.bulk_create(rows)
        transaction.on_commit(lambda: metrics.records_logged(
            team_id=team_id, kind=kind, count=len(rows), first_accepted=list(first_accepted)
        ))
    if name_messages:
        events.dashboard_notify(team_id, "message", target=target, message_ids=[r.message_id for r in rows])
    else:
        events.dashboard_notify(team_id, "message", target=target)


def member_logged(*, team_id: int, data: dict, status: str | None = None) -> None:
    """A roster change (``data`` names the member); the doorbell carries its status when it changed."""
    LeadLogRecord.objects.create(team_id=team_id, kind=LogKind.MEMBER, data=data)
    if status is not None:
        events.dashboard_notify(team_id, "member", member=data["member"], status=status)


def member_status_logged(member, previous: str) -> None:
    """A member's status moved from ``previous`` (a session's hello, status, close; a failed
    start): one record and doorbell; nothing when it did not move."""
    if member.status != previous:
        member_logged(
            team_id=member.team_id,
            data={"member": member.name, "status": member.status, "previous": previous},
            status=member.status,
        )


def budget_logged(*, team_id: int, data: dict) -> None:
    """The team's token budget was set (``data``: the tokens, and by whom)."""
    LeadLogRecord.objects.create(team_id=team_id, kind=LogKind.BUDGET, data=data)
    events.dashboard_notify(team_id, "budget")


def task_logged(*, team_id: int, data: dict) -> None:
    """A task-board change (``data`` names the task)."""
    LeadLogRecord.objects.create(team_id=team_id, kind=LogKind.TASK, data=data)
    events.dashboard_notify(team_id, "task", task=data["task"])


# --- readers ----------------------------------------------------------------------------------

def message_events(*, message: TeamMessage) -> list[dict]:
    """Every Lead-log record of one message, oldest first, as trace events:
    ``{"kind", "at", "since_previous", ...}`` (seconds since the event before; the
    record's own fields follow: ``error`` for ``failed``, ``by`` for ``retried``, ...).
    An ``accepted`` record that pushed again is the event ``repushed``."""
    out: list[dict] = []
    previous = None
    for record in LeadLogRecord.objects.filter(message_id=message.id).order_by("id"):
        data = record.data if isinstance(record.data, dict) else {}
        kind = EVENT_KINDS.get(record.kind, record.kind)
        if kind == "accepted" and data.get("redelivery"):
            kind = "repushed"
        since = round((record.created_at - previous).total_seconds(), 3) if previous else None
        out.append({**data, "kind": kind, "at": iso(record.created_at), "since_previous": since, "record": record.id})
        previous = record.created_at
    return out


def delivery_entry(*, message: TeamMessage) -> dict | None:
    """The target's history entry that carries the message, with the turn it entered
    (the entry's own ``turn_id``, else the last ``turn_start`` before it)."""
    entry = HistoryEntry.objects.filter(member_id=message.target_id, message_id=message.id).first()
    if entry is None:
        return None
    data = entry.data if isinstance(entry.data, dict) else {}
    turn_id = history.turn_of(entry)
    step = data.get("step")
    return {
        "entry_id": entry.entry_id,
        "position": entry.id,
        "at": iso(entry.created_at),
        "turn_id": turn_id,
        "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
    }


def message_now(*, message: TeamMessage) -> dict:
    """Where the message is now and why: ``{"state", "since", "reason"}``. The trace's
    last row: its events say what happened (a retry, a push), not that it still waits."""
    target = message.target.name
    if message.state == MessageState.QUEUED:
        since = message.queued_at
        reason = message.last_error or (
            f"waiting for admission: recovery tries again every sweep, or when {target}'s session or a host connects"
        )
    elif message.state == MessageState.ACCEPTED:
        since = message.accepted_at or message.queued_at
        reason = (
            f"pushed to {target}; delivered once {target}'s session records it in its history "
            f"(pushed again after {settings.STEERBOARD['REDELIVER_AFTER']:g} s, backing off, if it does not)"
        )
    elif message.state == MessageState.DELIVERED:
        since, reason = message.delivered_at, f"in {target}'s history"
    else:
        since, reason = message.cancelled_at, "cancelled: never pushed or replayed again"
    return {"state": message.state, "since": iso(since or message.queued_at), "reason": reason}


def message_trace(*, message: TeamMessage) -> dict:
    """One message's trace: its events in order, where it is now and why, and the history
    entry that delivered it."""
    return {
        "events": message_events(message=message),
        "now": message_now(message=message),
        "delivered_by": delivery_entry(message=message),
    }
