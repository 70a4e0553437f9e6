"""The hot path's SQL (mailbox/hot_path.py): its statements for each database
vendor, the driver's own cursor it runs them on, and what the process's writer
(mailbox/writer.py) does around a batch of its jobs: the batch's transaction
(``hot_transaction``), its pipeline (``jobs_piped``) and its Lead-log records in
one statement (``log_rows_flush``).

The Lead-log records are the Lead log's (mailbox/lead_log_records.py): each
record's fields, the batch INSERT ``log_rows_flush`` runs and the INSERT clauses
of the PostgreSQL statements come from there, and this module composes its
statements from them and runs them.

Below both the jobs and the database threads: mailbox/db.py builds the writer
with these three, and hot_path's jobs run the statements; neither needs the other.
"""
import contextlib

from django.db import connection

from mailbox import sqlcount
from mailbox.lead_log_records import (
    accepted_record, delivered_record, queued_record, records_from, records_select, rows_insert, rows_values,
)
from mailbox.models import HistoryEntry, HostPresence, HumanPrompt, LogKind, TeamMessage
from mailbox.writer import Batch
from teams.errors import TeamError
from teams.models import Member


def hosts_exists(member: str, hosts: str) -> str:
    return f"EXISTS (SELECT 1 FROM {hosts} WHERE team_id = {member}.team_id)"


class Statements:
    """The hot path's statements for one database vendor."""

    def __init__(self, vendor: str):
        json_value = "CAST(%s AS jsonb)" if vendor == "postgresql" else "%s"
        member, message = Member._meta.db_table, TeamMessage._meta.db_table
        history = HistoryEntry._meta.db_table
        hosts = HostPresence._meta.db_table

        def pending(state: str) -> str:
            # One index range per state ((target, state, seq)): the pending few, never the inbox.
            return f"(SELECT COUNT(*) FROM {message} WHERE target_id = {member}.id AND state = '{state}')"

        # Takes the target's row lock (as select_for_update(no_key=True) does), hands out
        # its next seq and refuses a full mailbox, in one statement.
        self.target_claim = (
            f"UPDATE {member} SET next_seq = next_seq + 1 "
            f"WHERE team_id = %s AND name = %s AND phase NOT IN ('retired', 'failed') "
            f"AND {pending('queued')} + {pending('accepted')} < %s "
            f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, {pending('queued')}, "
            f"{hosts_exists(member, hosts)}"
        )
        self.target_refusal = f"SELECT id, phase FROM {member} WHERE team_id = %s AND name = %s"
        self.target_pending = (
            f"SELECT COUNT(*) FROM {message} WHERE target_id = %s AND state IN ('queued', 'accepted')"
        )
        self.reply_thread = (
            f"SELECT id, thread_id FROM {message} WHERE id = %s AND team_id = %s AND target_id = %s"
        )
        self.message_insert = (
            f"INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, "
            f"state, attempts, last_error, created_at, queued_at, accepted_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, '', %s, %s, %s)"
        )
        self.entry_insert = (
            f"INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
            f"VALUES (%s, %s, %s, %s, %s, {json_value}, %s) ON CONFLICT DO NOTHING RETURNING id"
        )
        self.entry_undo = f"DELETE FROM {history} WHERE id = %s"
        # Delivered only while the history holds the message (the entry may have folded
        # on another entry's id) and only once; no existence checks before it.
        self.mark_delivered = (
            f"UPDATE {message} SET state = 'delivered', delivered_at = %s, accepted_at = COALESCE(accepted_at, %s) "
            f"WHERE id = %s AND target_id = %s AND state <> 'delivered' "
            f"AND EXISTS (SELECT 1 FROM {history} WHERE member_id = %s AND message_id = %s) "
            f"RETURNING seq"
        )
        self.message_is_mine = f"SELECT 1 FROM {message} WHERE id = %s AND target_id = %s"
        self.prompt_started = (
            f"UPDATE {HumanPrompt._meta.db_table} SET state = 'started', started_at = %s "
            f"WHERE id = %s AND target_id = %s AND state = 'queued'"
        )
        # The batch INSERT of the Lead-log records the jobs append (log_rows_flush).
        self.log_insert_head, self.log_row = rows_values(json_value)
        if vendor != "postgresql":
            self.send_piped = self.entry_piped = None
            return
        # PostgreSQL runs each job as one statement (one round trip): the steps above,
        # with their Lead-log records, joined by data-modifying WITH clauses (which
        # SQLite does not have). Needing no other statement's answer, a batch's
        # statements go out in one pipeline (jobs_piped).
        pushable = "phase IN ('active', 'provisioning') AND session_state IN ('running', 'idle')"
        text = "CAST(%(target)s AS text)"
        queued_none = f"NOT EXISTS (SELECT 1 FROM {message} WHERE target_id = {member}.id AND state = 'queued')"
        pending_all = (
            f"(SELECT COUNT(*) FROM {message} WHERE target_id = {member}.id AND state IN ('queued', 'accepted'))"
        )
        # The send's records: queued, and accepted when admitted in the same statement.
        send_records = records_from(
            records_select(
                LogKind.MESSAGE_QUEUED, queued_record(sender="CAST(%(sender_name)s AS text)", target=text, seq="t.seq"),
                team="%(team)s", message="%(id)s", now="%(now)s", source="t",
            ),
            records_select(
                LogKind.MESSAGE_ACCEPTED,
                accepted_record(target=text, seq="t.seq", target_status="t.session_state", redelivery="false"),
                team="%(team)s", message="%(id)s", now="%(now)s", source="t", where="t.admit",
            ),
        )
        self.send_piped = (
            f"WITH t AS (UPDATE {member} SET next_seq = next_seq + 1 "
            f"WHERE team_id = %(team)s AND name = %(target)s AND phase NOT IN ('retired', 'failed') "
            f"AND {pending_all} < %(limit)s "
            f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, "
            f"{hosts_exists(member, hosts)} AS has_host, ({pushable} AND {queued_none} AND %(may)s) AS admit), "
            f"m AS (INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, "
            f"state, attempts, last_error, created_at, queued_at, accepted_at) "
            f"SELECT %(id)s, %(team)s, %(sender)s, t.id, %(content)s, t.seq, %(thread)s, %(reply_to)s, "
            f"CASE WHEN t.admit THEN 'accepted' ELSE 'queued' END, CASE WHEN t.admit THEN 1 ELSE 0 END, '', "
            f"%(now)s, %(now)s, CASE WHEN t.admit THEN %(now)s ELSE NULL END FROM t), "
            f"l AS ({send_records}) "
            f"SELECT t.id, t.seq, t.phase, t.session_state, t.session_channel, t.has_host, t.admit FROM t"
        )
        entry_records = records_from(
            records_select(
                LogKind.MESSAGE_DELIVERED, delivered_record(target="CAST(%(name)s AS text)", seq="d.seq"),
                team="%(team)s", message="%(message)s", now="%(now)s", source="d",
            ),
            skip_existing=True,
        )
        self.entry_piped = (
            f"WITH h AS (INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
            f"VALUES (%(member)s, %(entry_id)s, %(kind)s, %(message)s, %(prompt)s, CAST(%(data)s AS jsonb), %(now)s) "
            f"ON CONFLICT DO NOTHING RETURNING id), "
            f"d AS (UPDATE {message} SET state = 'delivered', delivered_at = %(now)s, "
            f"accepted_at = COALESCE(accepted_at, %(now)s) "
            f"WHERE %(mark)s AND id = %(message)s AND target_id = %(member)s AND state <> 'delivered' "
            f"AND (EXISTS (SELECT 1 FROM h) "
            f"OR EXISTS (SELECT 1 FROM {history} WHERE member_id = %(member)s AND message_id = %(message)s)) "
            f"RETURNING seq), "
            f"l AS ({entry_records}), "
            f"p AS (UPDATE {HumanPrompt._meta.db_table} SET state = 'started', started_at = %(now)s "
            f"WHERE id = %(prompt)s AND target_id = %(member)s AND state = 'queued') "
            f"SELECT (SELECT id FROM h), (SELECT seq FROM d), "
            f"EXISTS (SELECT 1 FROM {message} WHERE id = %(message)s AND target_id = %(member)s)"
        )


_by_vendor: dict[str, Statements] = {}


def statements(db=None) -> Statements:
    vendor = (db or connection).vendor
    found = _by_vendor.get(vendor)
    if found is None:
        found = Statements(vendor)
        if vendor == "sqlite":  # the raw sqlite3 cursor's placeholder
            for name, statement in vars(found).items():
                if statement is not None:
                    setattr(found, name, statement.replace("%s", "?"))
        _by_vendor[vendor] = found
    return found


def _prepared_statements_on(raw) -> None:
    """Let the writer's connection keep its statements prepared. Django turns psycopg's
    prepared statements off (prepare_threshold None), and then ``prepare=True`` is
    ignored too: PostgreSQL planned each of the hot path's statements on every call,
    about 60 % of its CPU per message. Only the writer's own connection is changed.
    (Behind PgBouncer in transaction pooling this needs its ``max_prepared_statements``.)"""
    if raw.prepare_threshold is None:
        raw.prepare_threshold = 5


class HotCursor:
    """The driver's own cursor on Django's connection (inside Django's transaction),
    without Django's cursor wrappers: on PostgreSQL it binds parameters on the
    server and prepares the fixed statements (Django's cursor quotes every
    parameter into the SQL text in Python, a tenth of the hot path's time)."""

    def __init__(self, db):
        self.db = db
        db.ensure_connection()
        raw = db.connection
        self.postgres = db.vendor == "postgresql"
        if self.postgres:
            import psycopg

            _prepared_statements_on(raw)
            self.cursor = psycopg.Cursor(raw)
        else:
            self.cursor = raw.cursor()
        self.counting = sqlcount.installed()

    def execute(self, statement: str, params, *, prepare: bool = True) -> None:
        if self.counting:
            sqlcount.statement_run(in_transaction=True)
        try:
            if self.postgres:
                self.cursor.execute(statement, params, prepare=prepare)
            else:
                self.cursor.execute(statement, params)
        except Exception:
            self.db.errors_occurred = True  # the writer then closes this connection (mailbox/db.py)
            raise

    def fetchone(self):
        return self.cursor.fetchone()

    def __enter__(self) -> "HotCursor":
        return self

    def __exit__(self, *exc) -> None:
        self.cursor.close()


@contextlib.contextmanager
def hot_transaction(batch: Batch):
    """A writer batch's transaction: BEGIN and COMMIT on the driver's connection.

    The jobs run raw statements only, so Django's atomic() (savepoint and
    on-commit bookkeeping, autocommit switching) would add its cost and nothing
    else. Django's connection stays in autocommit between batches, as outside
    any atomic block; a failure rolls back, and marks the connection so the
    writer closes it if it is broken (mailbox/db.py)."""
    db = batch.db
    db.ensure_connection()
    raw = db.connection
    try:
        if db.vendor == "postgresql":
            # BEGIN goes out with the batch's statements, COMMIT on its own:
            # two round trips a batch, whatever its size.
            with raw.pipeline():
                raw.execute("BEGIN")
                yield
                raw.execute("COMMIT")
        else:
            raw.execute("BEGIN IMMEDIATE")
            yield
            raw.execute("COMMIT")
    except BaseException:
        try:
            raw.execute("ROLLBACK")
        except Exception:
            pass
        db.errors_occurred = True
        raise
    if sqlcount.installed():
        sqlcount.commit_run()


def jobs_piped(jobs: list, batch: Batch) -> list:
    """PostgreSQL: send the statements of the jobs that have one in one pipeline
    (one round trip for the batch instead of one per statement), then hand each
    job its row. Answers the jobs that still need to run one by one."""
    offered = [(job, job.piped(batch)) for job in jobs] if statements(batch.db).send_piped else []
    piped = [(job, st) for job, st in offered if st is not None]
    if not piped:
        return jobs
    import psycopg

    batch.db.ensure_connection()
    raw = batch.db.connection
    _prepared_statements_on(raw)
    counting = sqlcount.installed()
    cursors = []
    try:
        with raw.pipeline():
            for job, (statement, params) in piped:
                cursor = psycopg.Cursor(raw)
                cursor.execute(statement, params, prepare=True)
                cursors.append((job, cursor))
                if counting:
                    sqlcount.statement_run(in_transaction=True)
    except Exception:
        batch.db.errors_occurred = True
        raise
    for job, cursor in cursors:
        job.error = None
        try:
            job.piped_result(cursor.fetchone(), batch)
        except TeamError as exc:  # a refusal wrote nothing (or undid its entry)
            job.error = exc
        finally:
            cursor.close()
    done = {id(job) for job, _ in piped}
    return [job for job in jobs if id(job) not in done]


def log_rows_flush(batch: Batch) -> None:
    """A batch's Lead-log records, in the order its jobs appended them, in one statement."""
    if not batch.log_rows:
        return
    sql = statements(batch.db)
    statement, params = rows_insert(sql.log_insert_head, sql.log_row, batch.log_rows, batch.now_db)
    with HotCursor(batch.db) as cursor:
        cursor.execute(statement, params, prepare=False)
