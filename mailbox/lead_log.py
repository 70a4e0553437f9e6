"""The Lead log: each team's append-only record of what happened, and its readers.

Every record is written by the Lead log (docs/delivery.md, "The Lead log"): a
function here appends the record in the caller's transaction and rings the team's
dashboards once that transaction commits, so whatever path changed something (a
tool, a session, an operator, a management command, recovery) logs and notifies
the same way. What a message record holds, and the SQL that appends records, are
defined once, in mailbox/lead_log_records.py: the callers here build each record's
data with its builders (``queued_record``, ``accepted_record``, ...), and so does
the send/deliver hot path (mailbox/hot_path.py), whose statements
(mailbox/hot_sql.py) append its records with that module's INSERTs: one per writer
batch (``batch.log``, ``log_rows_flush``) on SQLite, a clause of each job's one
statement on PostgreSQL. The hot path rings the dashboards itself after its batch
commits.

The readers: ``message_trace`` (one message's history, for the trace page and
``GET /api/v1/teams/<team>/messages/<id>``).
"""
from collections.abc import Iterable

from mailbox import events, history
from mailbox.models import HistoryEntry, LeadLogRecord, LogKind, TeamMessage
from teams.wire_format import iso

# The trace's name for each message record (``data-event`` on the trace page).
EVENT_KINDS = {
    LogKind.MESSAGE_QUEUED: "queued",
    LogKind.MESSAGE_ACCEPTED: "accepted",
    LogKind.MESSAGE_FAILED: "failed",
    LogKind.MESSAGE_RETRIED: "retried",
    LogKind.MESSAGE_DELIVERED: "delivered",
}


# --- writers ----------------------------------------------------------------------------------
def message_logged(*, message: TeamMessage, kind: str, data: dict, target: str) -> None:
    """One record of one message, and the doorbell naming it."""
    LeadLogRecord.objects.create(team_id=message.team_id, kind=kind, message=message, data=data)
    events.dashboard_notify(message.team_id, "message", message_id=message.id, target=target)


def messages_logged(
    *, team_id: int, kind: str, records: Iterable[tuple[str, dict]], target: str, name_messages: bool = True
) -> None:
    """Records of several messages of one target in one INSERT (``records``: (message id, data)),
    and one doorbell for them all."""
    rows = [LeadLogRecord(team_id=team_id, kind=kind, message_id=mid, data=data) for mid, data in records]
    if rows:
        LeadLogRecord.objects.bulk_create(rows)
    if name_messages:
        events.dashboard_notify(team_id, "message", target=target, message_ids=[r.message_id for r in rows])
    else:
        events.dashboard_notify(team_id, "message", target=target)


def member_logged(*, team_id: int, data: dict, status: str | None = None) -> None:
    """A roster change (``data`` names the member); the doorbell carries its status when it changed."""
    LeadLogRecord.objects.create(team_id=team_id, kind=LogKind.MEMBER, data=data)
    if status is not None:
        events.dashboard_notify(team_id, "member", member=data["member"], status=status)


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


def message_trace(*, message: TeamMessage) -> dict:
    """One message's trace: its events in order and the history entry that delivered it."""
    return {"events": message_events(message=message), "delivered_by": delivery_entry(message=message)}
