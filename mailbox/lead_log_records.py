"""The Lead log's message records: each kind's fields, and the SQL that appends records.

Part of the Lead log (mailbox/lead_log.py; docs/delivery.md, "The Lead log"): the one
definition of what a message record holds, and the one text of the INSERT that appends
records, for every path that writes them. lead_log's writers (the ORM path, in
mailbox/delivery.py) and the hot path's jobs (mailbox/hot_path.py) build each record's
data with the builders below; the hot path's statements (mailbox/hot_sql.py) take their
Lead-log INSERTs from here.

It is a module of its own, importing only the models, because hot_sql cannot import
lead_log: hot_sql is below mailbox/db.py, which mailbox/events.py imports, and lead_log
rings the dashboards through events (hot_sql -> lead_log -> events -> db -> hot_sql
would be a circle; tests/test_import_graph.py).
"""
from mailbox.models import LeadLogRecord, LogKind

# Each message record kind's fields, in the order a record holds them.
MESSAGE_FIELDS: dict[str, tuple[str, ...]] = {
    LogKind.MESSAGE_QUEUED: ("sender", "target", "seq"),
    LogKind.MESSAGE_ACCEPTED: ("target", "seq", "target_status", "redelivery"),
    LogKind.MESSAGE_FAILED: ("target", "seq", "error", "waiting"),
    LogKind.MESSAGE_RETRIED: ("target", "seq", "state", "by"),
    LogKind.MESSAGE_DELIVERED: ("target", "seq"),
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
