"""The hot path: the delivery state machine's send and entry transitions as raw SQL,
group-committed by the writer (mailbox/writer.py).

``delivery.message_send`` + ``delivery.target_admit`` and ``delivery.entry_record`` +
``delivery.message_mark_delivered`` are the reference; the jobs below make the same
rows in fewer statements (tests/mailbox/test_hot_path.py compares the two). A send to
a running or idle target with nothing queued before it is enqueued *and* admitted in
one transaction (its `queued` and `accepted` records together) and pushed after the
commit; any other send is enqueued here and admitted by ``target_admit`` after the
commit, exactly as before. An entry and its `delivered` record commit together.
"""
import asyncio
import contextlib
import json
import logging

from django.conf import settings
from django.db import connection

from mailbox import events, faults, sqlcount
from mailbox import writer as _writer
from mailbox.answers import observation, send_answer
from mailbox.delivery import message_admit_enqueued, message_validate, refuse_phase
from mailbox.models import (
    HistoryEntry,
    HostPresence,
    LeadLogRecord,
    LogKind,
    MessageKind,
    MessageState,
    TeamMessage,
    message_id_new,
)
from mailbox.wire import steer_message
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Status, status_of

log = logging.getLogger(__name__)

_ADMISSION_FAULTS = ("inspection", "admission", "push")


def hosts_exists(member: str, hosts: str) -> str:
    return f"EXISTS (SELECT 1 FROM {hosts} WHERE team_id = {member}.team_id)"


class _Sql:
    """The hot path's statements for one database vendor."""

    def __init__(self, vendor: str):
        json_value = "CAST(%s AS jsonb)" if vendor == "postgresql" else "%s"
        member, message = Member._meta.db_table, TeamMessage._meta.db_table
        history, log_table = HistoryEntry._meta.db_table, LeadLogRecord._meta.db_table
        hosts = HostPresence._meta.db_table
        from mailbox.models import HumanPrompt

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
        self.log_insert_head = f"INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) VALUES "
        self.log_row = f"(%s, %s, %s, {json_value}, %s)"
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
            f"l AS (INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) "
            f"SELECT %(team)s, '{LogKind.MESSAGE_QUEUED}', %(id)s, jsonb_build_object('sender', "
            f"CAST(%(sender_name)s AS text), 'target', {text}, 'seq', t.seq), %(now)s FROM t "
            f"UNION ALL SELECT %(team)s, '{LogKind.MESSAGE_ACCEPTED}', %(id)s, jsonb_build_object('target', {text}, "
            f"'seq', t.seq, 'target_status', t.session_state, 'redelivery', false), %(now)s FROM t WHERE t.admit) "
            f"SELECT t.id, t.seq, t.phase, t.session_state, t.session_channel, t.has_host, t.admit FROM t"
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
            f"l AS (INSERT INTO {log_table} (team_id, kind, message_id, data, created_at) "
            f"SELECT %(team)s, '{LogKind.MESSAGE_DELIVERED}', %(message)s, jsonb_build_object('target', "
            f"CAST(%(name)s AS text), 'seq', d.seq), %(now)s FROM d ON CONFLICT DO NOTHING), "
            f"p AS (UPDATE {HumanPrompt._meta.db_table} SET state = 'started', started_at = %(now)s "
            f"WHERE id = %(prompt)s AND target_id = %(member)s AND state = 'queued') "
            f"SELECT (SELECT id FROM h), (SELECT seq FROM d), "
            f"EXISTS (SELECT 1 FROM {message} WHERE id = %(message)s AND target_id = %(member)s)"
        )


_sql_by_vendor: dict[str, _Sql] = {}


def _sql(db=None) -> _Sql:
    vendor = (db or connection).vendor
    found = _sql_by_vendor.get(vendor)
    if found is None:
        found = _Sql(vendor)
        if vendor == "sqlite":  # the raw sqlite3 cursor's placeholder
            for name, statement in vars(found).items():
                if statement is not None:
                    setattr(found, name, statement.replace("%s", "?"))
        _sql_by_vendor[vendor] = found
    return found


def _prepared_statements_on(raw) -> None:
    """Let the writer's connection keep its statements prepared. Django turns psycopg's
    prepared statements off (prepare_threshold None), and then ``prepare=True`` is
    ignored too: PostgreSQL planned each of the hot path's statements on every call,
    about 60 % of its CPU per message. Only the writer's own connection is changed.
    (Behind PgBouncer in transaction pooling this needs its ``max_prepared_statements``.)"""
    if raw.prepare_threshold is None:
        raw.prepare_threshold = 5


class _HotCursor:
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

    def __enter__(self) -> "_HotCursor":
        return self

    def __exit__(self, *exc) -> None:
        self.cursor.close()


_hot_cursor = _HotCursor


@contextlib.contextmanager
def hot_transaction(batch: "_writer.Batch"):
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


def jobs_piped(jobs: list, batch: "_writer.Batch") -> list:
    """PostgreSQL: send the statements of the jobs that have one in one pipeline
    (one round trip for the batch instead of one per statement), then hand each
    job its row. Answers the jobs that still need to run one by one."""
    statements = [(job, job.piped(batch)) for job in jobs] if _sql(batch.db).send_piped else []
    piped = [(job, st) for job, st in statements if st is not None]
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


def log_rows_flush(batch: "_writer.Batch") -> None:
    """A batch's Lead-log records, in the order its jobs appended them, in one statement."""
    if not batch.log_rows:
        return
    sql = _sql(batch.db)
    now = batch.now_db
    params: list = []
    for team_id, kind, message_id, data in batch.log_rows:
        params += [team_id, kind, message_id, data, now]
    statement = sql.log_insert_head + ", ".join([sql.log_row] * len(batch.log_rows)) + " ON CONFLICT DO NOTHING"
    with _hot_cursor(batch.db) as cursor:
        cursor.execute(statement, params, prepare=False)


def _refuse_target(cursor, *, team_id: int, target_name: str) -> None:
    sql = _sql(cursor.db)
    cursor.execute(sql.target_refusal, [team_id, target_name])
    row = cursor.fetchone()
    if row is None:
        raise TeamError(
            ErrorCode.TEAM_UNKNOWN_TARGET,
            f"No member named {target_name!r} on this team; list_agents shows the roster.",
            persisted=False,
        )
    refuse_phase(Member(name=target_name, phase=row[1]))
    cursor.execute(sql.target_pending, [row[0]])
    pending = cursor.fetchone()[0]
    raise TeamError(
        ErrorCode.TEAM_MAILBOX_FULL,
        f"{target_name} already has {pending} undelivered messages; wait for it to catch up (wait_agent).",
        persisted=False,
    )


class SendJob(_writer.Job):
    """Enqueue (and, for a running or idle target with nothing queued, admit) one message."""

    def __init__(self, *, sender: Member, target_name: str, content: str, reply_to: str = ""):
        super().__init__()
        message_validate(sender=sender, target_name=target_name, content=content)
        self.sender = sender
        self.target_name = target_name
        self.content = content
        self.reply_to = reply_to
        self.message_id = message_id_new()
        self.may_admit = not faults.armed(_ADMISSION_FAULTS)
        self.admitted = False
        self.lock_order = (1, sender.team_id, target_name)

    def execute(self, batch) -> None:
        sender, sql = self.sender, _sql(batch.db)
        now = batch.now_db
        with _hot_cursor(batch.db) as cursor:
            self.thread_id = ""
            if self.reply_to:
                cursor.execute(sql.reply_thread, [self.reply_to, sender.team_id, sender.pk])
                row = cursor.fetchone()
                if row is None:
                    raise TeamError(
                        ErrorCode.NOT_FOUND, f"You received no message {self.reply_to!r} to reply to.", persisted=False
                    )
                self.thread_id = row[1] or row[0]
            if sql.send_piped:  # PostgreSQL: the same one statement a pipelined batch sends
                cursor.execute(sql.send_piped, self._piped_params(batch))
                self.piped_result(cursor.fetchone(), batch)
                return
            claim = [sender.team_id, self.target_name, settings.STEERBOARD["MAX_PENDING_PER_TARGET"]]
            cursor.execute(sql.target_claim, claim)
            row = cursor.fetchone()
            if row is None:
                _refuse_target(cursor, team_id=sender.team_id, target_name=self.target_name)
            self.target_id, self.seq, phase, session_state, self.channel, queued_before, has_host = row
            self.target_status = status_of(phase, session_state)
            self.has_host = bool(has_host)
            # Admission here only when it is a push: every earlier message of this target
            # is already accepted (none queued), so seq order holds.
            self.admitted = (
                self.may_admit and self.target_status in (Status.RUNNING, Status.IDLE) and not queued_before
            )
            cursor.execute(
                sql.message_insert,
                [
                    self.message_id, sender.team_id, sender.pk, self.target_id, self.content, self.seq,
                    self.thread_id, self.reply_to,
                    MessageState.ACCEPTED if self.admitted else MessageState.QUEUED,
                    1 if self.admitted else 0, now, now, now if self.admitted else None,
                ],
            )
        self._log(batch)

    def _log(self, batch) -> None:
        sender = self.sender
        self.created_at = batch.now
        batch.log(
            team_id=sender.team_id, kind=LogKind.MESSAGE_QUEUED, message_id=self.message_id,
            data=json.dumps({"sender": sender.name, "target": self.target_name, "seq": self.seq}),
        )
        if self.admitted:
            batch.log(
                team_id=sender.team_id, kind=LogKind.MESSAGE_ACCEPTED, message_id=self.message_id,
                data=json.dumps(
                    {"target": self.target_name, "seq": self.seq, "target_status": self.target_status,
                     "redelivery": False}
                ),
            )

    def piped(self, batch) -> tuple[str, dict] | None:
        """The job as one statement that needs no other's answer (PostgreSQL), or None
        (a reply first looks up its thread: ``execute`` runs it)."""
        sql = _sql(batch.db)
        if not sql.send_piped or self.reply_to:
            return None
        self.thread_id = ""
        return sql.send_piped, self._piped_params(batch)

    def _piped_params(self, batch) -> dict:
        return {
            "team": self.sender.team_id, "target": self.target_name, "limit": settings.STEERBOARD["MAX_PENDING_PER_TARGET"],
            "may": self.may_admit, "id": self.message_id, "sender": self.sender.pk, "sender_name": self.sender.name,
            "content": self.content, "thread": self.thread_id, "reply_to": self.reply_to, "now": batch.now,
        }

    def piped_result(self, row, batch) -> None:
        if row is None:
            with _hot_cursor(batch.db) as cursor:
                _refuse_target(cursor, team_id=self.sender.team_id, target_name=self.target_name)
        self.target_id, self.seq, phase, session_state, self.channel, has_host, self.admitted = row
        self.target_status = status_of(phase, session_state)
        self.has_host = bool(has_host)
        self.created_at = batch.now

    def committed(self) -> None:
        if self.admitted:  # otherwise message_admit_enqueued reaches the point, before its admission
            faults.crash_point("after_queued_commit")

    def wire(self) -> dict:
        return steer_message(
            id=self.message_id, sender=self.sender.name, target=self.target_name, content=self.content,
            seq=self.seq, created_at=self.created_at, thread_id=self.thread_id, kind=MessageKind.MESSAGE,
        )

    def finish(self) -> None:
        if self.admitted:
            events.session_push(self.channel, {"type": "session.steer", "message": self.wire()})
            faults.crash_point("after_admission")
        events.dashboard_ring(self.sender.team_id, {"type": "team.changed", "kind": "message", "target": self.target_name})

    def message(self) -> TeamMessage:
        """The stored row, as message_enqueue returns it."""
        message = TeamMessage(
            id=self.message_id, team_id=self.sender.team_id, sender=self.sender, content=self.content, seq=self.seq,
            thread_id=self.thread_id, reply_to=self.reply_to,
            state=MessageState.ACCEPTED if self.admitted else MessageState.QUEUED,
            attempts=1 if self.admitted else 0, created_at=self.created_at, queued_at=self.created_at,
            accepted_at=self.created_at if self.admitted else None,
        )
        message.target = Member(id=self.target_id, team_id=self.sender.team_id, name=self.target_name)
        message._state.adding = False
        message._state.db = "default"
        return message

    def answer(self) -> dict:
        """The sender's answer for a send admitted in the writer (no database)."""
        return {
            "message_id": self.message_id,
            "status": "accepted",
            "thread_id": self.thread_id or self.message_id,
            "delivery": observation(
                target=self.target_name, status=self.target_status, state=MessageState.ACCEPTED,
                has_host=self.has_host,
            ),
            "idempotent_replay": False,
        }


class EntryJob(_writer.Job):
    """Store one history entry (a repeat folds); a team message's entry marks it delivered in the same commit."""

    def __init__(self, *, member: Member, entry: dict):
        super().__init__()
        self.member = member
        self.entry = entry
        source = entry.get("source") or {}
        self.message_id = (
            source.get("message_id") if entry["kind"] == "user_message" and source.get("kind") == "team-message" else None
        )
        self.prompt_id = entry.get("prompt_id") if entry["kind"] == "prompt" else None
        self.data = json.dumps(entry)
        self.delivered = False

    def execute(self, batch) -> None:
        sql = _sql(batch.db)
        if sql.entry_piped:  # PostgreSQL: the same one statement a pipelined batch sends
            statement, params = self.piped(batch)
            with _hot_cursor(batch.db) as cursor:
                cursor.execute(statement, params)
                self.piped_result(cursor.fetchone(), batch)
            return
        member, now = self.member, batch.now_db
        self.delivered = False
        mark = bool(self.message_id) and not self._delivered_deferred()
        with _hot_cursor(batch.db) as cursor:
            cursor.execute(
                sql.entry_insert,
                [member.pk, self.entry["id"], self.entry["kind"], self.message_id, self.prompt_id, self.data, now],
            )
            found = cursor.fetchone()
            inserted, seq = (found[0] if found else None), None
            if mark:
                cursor.execute(sql.mark_delivered, [now, now, self.message_id, member.pk, member.pk, self.message_id])
                marked = cursor.fetchone()
                seq = marked[0] if marked else None
            if seq is not None:
                self.delivered = True
                batch.log(
                    team_id=member.team_id, kind=LogKind.MESSAGE_DELIVERED, message_id=self.message_id,
                    data=json.dumps({"target": member.name, "seq": seq}),
                )
            elif self.message_id:  # folded, deferred, or not this member's message at all
                cursor.execute(sql.message_is_mine, [self.message_id, member.pk])
                if cursor.fetchone() is None:
                    self._not_mine(cursor, inserted)
            if self.prompt_id:
                cursor.execute(sql.prompt_started, [now, self.prompt_id, member.pk])
        self.result = inserted is not None

    def piped(self, batch) -> tuple[str, dict] | None:
        sql = _sql(batch.db)
        if not sql.entry_piped:
            return None
        self.delivered = False
        member = self.member
        return sql.entry_piped, {
            "member": member.pk, "entry_id": self.entry["id"], "kind": self.entry["kind"], "message": self.message_id,
            "prompt": self.prompt_id, "data": self.data, "now": batch.now, "team": member.team_id,
            "name": member.name, "mark": bool(self.message_id) and not self._delivered_deferred(),
        }

    def piped_result(self, row, batch) -> None:
        inserted, seq, mine = row
        self.delivered = seq is not None
        if self.message_id and not mine:
            with _hot_cursor(batch.db) as cursor:
                self._not_mine(cursor, inserted)
        self.result = inserted is not None

    def _not_mine(self, cursor, inserted: int | None) -> None:
        """The entry names a message never addressed to this member: store nothing, refuse."""
        if inserted is not None:
            cursor.execute(_sql(cursor.db).entry_undo, [inserted])
        raise TeamError(ErrorCode.NOT_FOUND, f"No team message {self.message_id!r} was addressed to you.")

    def _delivered_deferred(self) -> bool:
        try:
            faults.inject("delivered_record")
        except faults.TemporaryDeliveryError:
            # The entry is durable; recovery (reconcile, or the session's next report) writes delivered.
            log.warning("delivered record for %s deferred to recovery", self.message_id)
            return True
        return False

    def committed(self) -> None:
        faults.crash_point("after_entry")

    def finish(self) -> None:
        team_id, name = self.member.team_id, self.member.name
        if self.delivered:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "message", "target": name})
        elif self.result:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "entry", "member": name})
        if self.prompt_id:
            events.dashboard_ring(team_id, {"type": "team.changed", "kind": "prompt", "member": name})


async def message_send_fast(*, sender: Member, target_name: str, content: str, reply_to: str = "") -> dict:
    """send_message through the writer; answers the sender's result (tools.py's shape)."""
    from mailbox.db import to_db_thread, writer

    job = SendJob(sender=sender, target_name=target_name, content=content, reply_to=reply_to)
    await writer().run(job)
    if job.admitted:
        return job.answer()
    # Anything but a plain push (a resume, a target with messages queued before this
    # one, a test's armed fault) is admitted by target_admit, as before.
    return await to_db_thread(_admit_and_answer)(job.message())


def _admit_and_answer(message: TeamMessage) -> dict:
    return send_answer(*message_admit_enqueued(message=message))


def entry_record_submit(*, member: Member, entry: dict) -> asyncio.Future:
    """entry_record through the writer: a future of whether the entry was new (False: folded).
    Raises TeamError at once, storing nothing, when the member's history quota refuses
    the entry (mailbox/quota.py: in memory, no SQL)."""
    from mailbox import quota
    from mailbox.db import writer

    job = EntryJob(member=member, entry=entry)
    quota.entry_charge(member_id=member.pk, size=len(job.data))
    return writer().run(job)
