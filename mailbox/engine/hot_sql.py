"""The SQL of the send and deliver transitions (mailbox/engine/hot_path.py's jobs run it): its
statements for each database vendor, the driver's own cursor it runs them on, and what
the process's writer (mailbox/plumbing/writer.py) does around a batch of jobs: the batch's
transaction (``hot_transaction``), its pipeline (``jobs_piped``) and what the jobs leave
for the end of the batch, in one statement each (``batch_flush``: the Lead-log records,
the idempotency keys' results).

Every state, phase and kind in these statements is the models' own (``MessageState``,
``Phase``, ``SessionState``, ``LogKind``), every Lead-log record is built by the Lead
log's builders (mailbox/engine/lead_log.py), and a prompt's start is the Queue adapter's
statement (mailbox/engine/queue_adapter.py): nothing here is typed twice.

Below the jobs and beside mailbox/plumbing/db.py, which is handed ``batch_flush``,
``jobs_piped`` and ``hot_transaction`` when the app is ready (mailbox/apps.py).
"""
import contextlib
import json
import re
import weakref

from django.db import connection

from mailbox.engine import queue_adapter
from mailbox.engine.lead_log import (
    accepted_record, delivered_record, failed_record, queued_record, records_from, records_select, rows_insert,
    rows_values,
)
from mailbox.plumbing.writer import Batch
from mailbox.models import (
    PENDING_STATES, TARGET_REFUSING_PHASES, TARGET_SESSIONLESS_STATUSES, HistoryEntry, HostPresence,
    IdempotencyRecord, LogKind, MemberUsage, MessageState, TeamMessage,
)
from mailbox.plumbing import runtime, sqlcount
from teams.errors import TeamError
from teams.models import Member, Phase, SessionState, Team


def _listed(*values) -> str:
    """A SQL list of the enum values (their own text, never typed here)."""
    return ", ".join(f"'{value}'" for value in values)


def hosts_exists(member: str, hosts: str) -> str:
    return f"EXISTS (SELECT 1 FROM {hosts} WHERE team_id = {member}.team_id)"


def status_of(member: str) -> str:
    """A member's status from its phase and session state, as teams.models.status_of has it."""
    return (
        f"CASE WHEN {member}.phase = '{Phase.ACTIVE}' THEN {member}.session_state "
        f"WHEN {member}.phase = '{Phase.PROVISIONING}' AND {member}.session_state <> '{SessionState.INACTIVE}' "
        f"THEN {member}.session_state ELSE {member}.phase END"
    )


def wait_param(status: str) -> str:
    """The name of a send's parameter that holds why a message to a ``status`` target waits."""
    return f"waits_{status}"


def tokens_used(team_id: str) -> str:
    """What a team's members' model replies used, in tokens (mailbox/members/usage.py: tokens_used)."""
    member, usage = Member._meta.db_table, MemberUsage._meta.db_table
    return (
        f"(SELECT COALESCE(SUM(u.input_tokens + u.output_tokens), 0) FROM {usage} u "
        f"JOIN {member} um ON um.id = u.member_id WHERE um.team_id = {team_id})"
    )


def budget_reason(template: str, team_id: str, default: str) -> str:
    """Why a message to the team waits while its budget is used up: ``template`` (usage's
    exhausted_reason with ``{used}`` and ``{tokens}`` left in) with the team's numbers filled
    in. Its placeholders come in this order: the template, the team, the default, the team."""
    budget = f"(SELECT COALESCE(token_budget, {default}) FROM {Team._meta.db_table} WHERE id = {team_id})"
    return (
        f"replace(replace(CAST({template} AS text), '{{used}}', CAST({tokens_used(team_id)} AS text)), "
        f"'{{tokens}}', CAST({budget} AS text))"
    )


def budget_exhausted(team_id: str, default: str) -> str:
    """Whether a team's token budget (its own, else ``default``, the setting's) is used up by
    what its members' model replies used (mailbox/members/usage.py); false without a budget."""
    team = Team._meta.db_table
    used = tokens_used("b.id")
    return (
        f"COALESCE((SELECT CASE WHEN b.budget IS NULL THEN false ELSE b.budget <= {used} END "
        f"FROM (SELECT id, COALESCE(token_budget, {default}) AS budget FROM {team} WHERE id = {team_id}) b), false)"
    )


class Statements:
    """The send and deliver statements for one database vendor."""

    def __init__(self, vendor: str):
        json_value = "CAST(%s AS jsonb)" if vendor == "postgresql" else "%s"
        member, message = Member._meta.db_table, TeamMessage._meta.db_table
        history = HistoryEntry._meta.db_table
        hosts = HostPresence._meta.db_table
        keys = IdempotencyRecord._meta.db_table
        pending = _listed(*PENDING_STATES)
        refusing = _listed(*TARGET_REFUSING_PHASES)
        queued, accepted, delivered, cancelled = (
            f"'{s}'" for s in (MessageState.QUEUED, MessageState.ACCEPTED, MessageState.DELIVERED, MessageState.CANCELLED)
        )
        # What a delivered mark answers: its seq and the latency metric's queued_at; when the
        # process traces (the ``_traced`` statements, so the others stay as they were), also
        # what the message's deliver span is made of (mailbox/plumbing/tracing.py).
        traced_columns = ("accepted_at", "traceparent", "tracestate")

        # The condition of the partial indexes on undelivered messages (models.UNDELIVERED), as
        # SQLite must read it in a query to use them: every read of pending messages repeats it.
        undelivered = f"NOT (state = {delivered})"

        def counted(state: str) -> str:
            # One index range per state ((target, state, seq)): the pending few, never the inbox.
            return (
                f"(SELECT COUNT(*) FROM {message} "
                f"WHERE target_id = {member}.id AND state = '{state}' AND {undelivered})"
            )

        pending_count = " + ".join(counted(s) for s in PENDING_STATES)
        # Takes the target's row lock (as select_for_update(no_key=True) does), hands out
        # its next seq and refuses a full mailbox, in one statement.
        self.target_claim = (
            f"UPDATE {member} SET next_seq = next_seq + 1 "
            f"WHERE team_id = %s AND name = %s AND phase NOT IN ({refusing}) AND {pending_count} < %s "
            f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, "
            f"{counted(MessageState.QUEUED)}, {hosts_exists(member, hosts)}, "
            f"{budget_exhausted(f'{member}.team_id', 'CAST(%s AS bigint)')}"
        )
        self.target_refusal = f"SELECT id, phase FROM {member} WHERE team_id = %s AND name = %s"
        self.target_pending = (
            f"SELECT COUNT(*) FROM {message} WHERE target_id = %s AND state IN ({pending}) AND {undelivered}"
        )
        self.budget_reason = f"SELECT {budget_reason('%s', '%s', 'CAST(%s AS bigint)')}"
        self.reply_thread = f"SELECT id, thread_id FROM {message} WHERE id = %s AND team_id = %s AND target_id = %s"
        self.message_insert = (
            f"INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, kind, "
            f"state, attempts, last_error, created_at, queued_at, accepted_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        )
        self.entry_insert = (
            f"INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
            f"VALUES (%s, %s, %s, %s, %s, {json_value}, %s) ON CONFLICT DO NOTHING RETURNING id"
        )
        self.entry_undo = f"DELETE FROM {history} WHERE id = %s"
        # Delivered only while pending, only while the history holds the message (the entry
        # may have folded on another entry's id), and only once; no existence checks before it.
        # A delivered message has no current error: its failures stay in its trace (the Lead log).
        self.mark_delivered = (
            f"UPDATE {message} SET state = {delivered}, delivered_at = %s, accepted_at = COALESCE(accepted_at, %s), "
            f"last_error = '' "
            f"WHERE id = %s AND target_id = %s AND state IN ({pending}) "
            f"AND EXISTS (SELECT 1 FROM {history} WHERE member_id = %s AND message_id = %s) "
            f"RETURNING seq, queued_at"
        )
        self.mark_delivered_traced = self.mark_delivered + "".join(f", {column}" for column in traced_columns)
        self.message_state = f"SELECT state FROM {message} WHERE id = %s AND target_id = %s"
        # A stored message's trace context (the writer's batch, only when its process traces).
        self.message_traced = f"UPDATE {message} SET traceparent = %s, tracestate = %s WHERE id = %s"
        self.prompt_started = queue_adapter.prompt_started_sql(now="%s", prompt="%s", member="%s")
        # An idempotency key (mailbox/engine/idempotency.py): a live key of this member and tool, and
        # the key claimed (taking over an expired one; no row back: the key is live).
        self.key_find = (
            f"SELECT id, fingerprint, result FROM {keys} WHERE member_id = %s AND tool = %s AND key = %s "
            f"AND created_at >= %s"
        )
        self.key_undo = f"DELETE FROM {keys} WHERE id = %s"
        # A new entry's usage, added to its member's sum for that model (mailbox/members/usage.py).
        usage = MemberUsage._meta.db_table
        self.usage_add = (
            f"INSERT INTO {usage} (member_id, model, input_tokens, output_tokens, cached_tokens, replies, updated_at) "
            f"VALUES (%s, %s, %s, %s, %s, 1, %s) "
            f"ON CONFLICT (member_id, model) DO UPDATE SET "
            f"input_tokens = {usage}.input_tokens + excluded.input_tokens, "
            f"output_tokens = {usage}.output_tokens + excluded.output_tokens, "
            f"cached_tokens = {usage}.cached_tokens + excluded.cached_tokens, "
            f"replies = {usage}.replies + 1, updated_at = excluded.updated_at"
        )
        # The batch INSERT of the Lead-log records the jobs append (batch_flush).
        self.log_insert_head, self.log_row = rows_values(json_value)
        # What a batch's keyed sends leave for its end, in one statement (batch_flush; ``{rows}``:
        # one ``_row`` each). PostgreSQL: the answers of the keys their statements claimed.
        # SQLite: the keys they claimed in memory (Batch.key_new), inserted with their answers;
        # one found expired is taken over (a live one was found by key_find, and replayed).
        self.key_results = (
            f"UPDATE {keys} SET result = v.result FROM (VALUES {{rows}}) AS v(id, result) WHERE {keys}.id = v.id"
        )
        self.key_results_row = "(CAST(%s AS bigint), CAST(%s AS jsonb))"
        self.keys_insert = (
            f"INSERT INTO {keys} (member_id, tool, key, fingerprint, result, created_at) VALUES {{rows}} "
            f"ON CONFLICT (member_id, tool, key) DO UPDATE SET fingerprint = excluded.fingerprint, "
            f"result = excluded.result, created_at = excluded.created_at"
        )
        self.keys_insert_row = "(%s, %s, %s, %s, %s, %s)"
        if vendor != "postgresql":
            self.send_piped = self.send_piped_keyed = self.entry_piped = self.entry_piped_usage = None
            self.entry_piped_traced = self.entry_piped_usage_traced = None
            return
        # PostgreSQL runs each job as one statement (one round trip): the steps above,
        # with their Lead-log records, joined by data-modifying WITH clauses (which
        # SQLite does not have). Needing no other statement's answer, a batch's
        # statements go out in one pipeline (jobs_piped).
        pushable = (
            f"phase IN ({_listed(Phase.ACTIVE, Phase.PROVISIONING)}) "
            f"AND session_state IN ({_listed(SessionState.RUNNING, SessionState.IDLE)})"
        )
        text = "CAST(%(target)s AS text)"
        queued_none = (
            f"NOT EXISTS (SELECT 1 FROM {message} WHERE target_id = {member}.id AND state = {queued} AND {undelivered})"
        )
        pending_all = (
            f"(SELECT COUNT(*) FROM {message} WHERE target_id = {member}.id AND state IN ({pending}) AND {undelivered})"
        )
        # The message waits (the team's budget is used up, or its target has no session and no
        # host): the send records that as its try (attempts 1) and why (last_error, a waiting
        # failed record), in the words admission uses (budget.exhausted_reason, filled in here,
        # or delivery.no_host_reason for the target's status, which the job passes).
        waits = (
            f"(%(records_wait)s AND (t.exhausted OR (t.status IN ({_listed(*TARGET_SESSIONLESS_STATUSES)}) "
            f"AND NOT t.has_host)))"
        )
        reason = (
            f"CASE WHEN t.exhausted THEN "
            f"{budget_reason('%(budget_reason)s', 't.team_id', 'CAST(%(budget)s AS bigint)')} "
            + " ".join(f"WHEN t.status = '{st}' THEN CAST(%({wait_param(st)})s AS text)" for st in TARGET_SESSIONLESS_STATUSES)
            + " ELSE '' END"
        )
        # The send's records: queued; accepted when admitted in the same statement, or failed
        # (waiting) when the message waits.
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
            records_select(
                LogKind.MESSAGE_FAILED, failed_record(target=text, seq="t.seq", error=reason, waiting="true"),
                team="%(team)s", message="%(id)s", now="%(now)s", source="t", where=waits,
            ),
        )

        exhausted = budget_exhausted(f"{member}.team_id", "CAST(%(budget)s AS bigint)")

        def send(claimed: str = "") -> str:
            return (
                f"t AS (UPDATE {member} SET next_seq = next_seq + 1 "
                f"WHERE team_id = %(team)s AND name = %(target)s AND phase NOT IN ({refusing}) "
                f"AND {pending_all} < %(limit)s {claimed}"
                f"RETURNING id, next_seq - 1 AS seq, phase, session_state, session_channel, "
                f"{hosts_exists(member, hosts)} AS has_host, "
                f"({pushable} AND {queued_none} AND %(may)s AND NOT {exhausted}) AS admit, {exhausted} AS exhausted, "
                f"team_id, {status_of(member)} AS status), "
                f"m AS (INSERT INTO {message} (id, team_id, sender_id, target_id, content, seq, thread_id, reply_to, "
                f"kind, state, attempts, last_error, created_at, queued_at, accepted_at) "
                f"SELECT %(id)s, %(team)s, %(sender)s, t.id, %(content)s, t.seq, %(thread)s, %(reply_to)s, %(kind)s, "
                f"CASE WHEN t.admit THEN {accepted} ELSE {queued} END, CASE WHEN t.admit OR {waits} THEN 1 ELSE 0 END, "
                f"CASE WHEN {waits} THEN {reason} ELSE '' END, "
                f"%(now)s, %(now)s, CASE WHEN t.admit THEN %(now)s ELSE NULL END FROM t), "
                f"l AS ({send_records}) "
            )

        target_columns = "t.id, t.seq, t.phase, t.session_state, t.session_channel, t.has_host, t.admit, t.exhausted"
        self.send_piped = f"WITH {send()}SELECT {target_columns} FROM t"
        # A keyed send claims its key first (with the message's ids as its result until the
        # batch stores the whole answer), and stores the message only when it did: the claim
        # and the send commit together or not at all. Unclaimed, it answers the key's row as
        # this statement saw it (NULL when another transaction committed it meanwhile).
        self.send_piped_keyed = (
            f"WITH k AS (INSERT INTO {keys} (member_id, tool, key, fingerprint, result, created_at) "
            f"VALUES (%(sender)s, %(tool)s, %(key)s, %(fingerprint)s, CAST(%(claimed)s AS jsonb), %(now)s) "
            f"ON CONFLICT (member_id, tool, key) DO UPDATE SET fingerprint = excluded.fingerprint, "
            f"result = excluded.result, created_at = excluded.created_at "
            f"WHERE {keys}.created_at < %(expired)s RETURNING id), "
            f"{send('AND EXISTS (SELECT 1 FROM k) ')}"
            f"SELECT {target_columns}, (SELECT id FROM k), p.fingerprint, p.result "
            f"FROM (SELECT 1) AS one LEFT JOIN t ON true LEFT JOIN {keys} AS p ON NOT EXISTS (SELECT 1 FROM k) "
            f"AND p.member_id = %(sender)s AND p.tool = %(tool)s AND p.key = %(key)s"
        )
        entry_records = records_from(
            records_select(
                LogKind.MESSAGE_DELIVERED, delivered_record(target="CAST(%(name)s AS text)", seq="d.seq"),
                team="%(team)s", message="%(message)s", now="%(now)s", source="d",
            ),
            skip_existing=True,
        )
        def entry(usage_clause: str = "", traced: bool = False) -> str:
            # The message the entry names is locked first (an operator's cancel takes the same
            # lock): the entry is stored only for a message of this member that is not
            # cancelled, so a cancel and the entry of a push already in flight never both win.
            more = traced_columns if traced else ()
            returned = ", ".join(("seq", "queued_at", *more))
            return (
                f"WITH lk AS (SELECT state FROM {message} WHERE id = %(message)s AND target_id = %(member)s FOR UPDATE), "
                f"h AS (INSERT INTO {history} (member_id, entry_id, kind, message_id, prompt_id, data, created_at) "
                f"SELECT %(member)s, %(entry_id)s, %(kind)s, %(message)s, %(prompt)s, CAST(%(data)s AS jsonb), %(now)s "
                f"WHERE CAST(%(message)s AS text) IS NULL OR EXISTS (SELECT 1 FROM lk WHERE state <> {cancelled}) "
                f"ON CONFLICT DO NOTHING RETURNING id), "
                f"d AS (UPDATE {message} SET state = {delivered}, delivered_at = %(now)s, "
                f"accepted_at = COALESCE(accepted_at, %(now)s), last_error = '' "
                f"WHERE %(mark)s AND id = %(message)s AND target_id = %(member)s AND state IN ({pending}) "
                f"AND (EXISTS (SELECT 1 FROM h) "
                f"OR EXISTS (SELECT 1 FROM {history} WHERE member_id = %(member)s AND message_id = %(message)s)) "
                f"RETURNING {returned}), "
                f"l AS ({entry_records}), "
                f"p AS ({queue_adapter.prompt_started_sql(now='%(now)s', prompt='%(prompt)s', member='%(member)s')}) "
                f"{usage_clause}"
                f"SELECT (SELECT id FROM h), (SELECT seq FROM d), (SELECT state FROM lk), (SELECT queued_at FROM d)"
                + "".join(f", (SELECT {column} FROM d)" for column in more)
            )

        self.entry_piped = entry()
        # An entry that reports its model reply's usage adds it to its member's sum, only when
        # the entry is new (a folded repeat adds nothing): apart, so entries without usage
        # keep the statement they had.
        usage_clause = (
            f", u AS (INSERT INTO {usage} (member_id, model, input_tokens, output_tokens, cached_tokens, replies, "
            f"updated_at) SELECT %(member)s, %(model)s, %(input)s, %(output)s, %(cached)s, 1, %(now)s FROM h "
            f"ON CONFLICT (member_id, model) DO UPDATE SET "
            f"input_tokens = {usage}.input_tokens + excluded.input_tokens, "
            f"output_tokens = {usage}.output_tokens + excluded.output_tokens, "
            f"cached_tokens = {usage}.cached_tokens + excluded.cached_tokens, "
            f"replies = {usage}.replies + 1, updated_at = excluded.updated_at) "
        )
        self.entry_piped_usage = entry(usage_clause)
        self.entry_piped_traced = entry(traced=True)
        self.entry_piped_usage_traced = entry(usage_clause, traced=True)


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


# A prepared statement's plan is made for the tables as they were. After five runs
# PostgreSQL keeps a generic plan, costed with the statistics it has then; on a new
# database those describe empty tables, where every index of a table looks as cheap as
# another, and the plan kept can walk a target's whole mailbox to find one message by its
# id (``(target_id, seq)`` chosen over the primary key: 400 buffer hits a delivered entry
# after 20 000 messages, and growing with them, until autovacuum's next ANALYZE made the
# plans again). So the writer's connection forgets its prepared statements each time the
# jobs it ran have doubled since the last time (from ``REPLAN_FIRST``): the next runs are
# planned for the tables as they are now. Cheap (a dozen statements planned again, at
# most about twenty times in a connection's first billion jobs).
REPLAN_FIRST = 1000
_jobs_run: "weakref.WeakKeyDictionary[object, list[int]]" = weakref.WeakKeyDictionary()


@runtime.on_reset
def _jobs_forgotten() -> None:
    _jobs_run.clear()


def _jobs_counted(raw, jobs: int) -> None:
    counted = _jobs_run.setdefault(raw, [0, REPLAN_FIRST])
    counted[0] += jobs


def _plans_renewed(raw) -> bool:
    """Between batches (no pipeline, no transaction: psycopg sees the command and forgets
    its own names too): the connection's prepared statements deallocated once its jobs have
    doubled. Answers whether it did."""
    counted = _jobs_run.get(raw)
    if counted is None or counted[0] < counted[1]:
        return False
    raw.execute("DEALLOCATE ALL")
    counted[1] = 2 * counted[0]
    return True


# psycopg finds a statement's placeholders by parsing its text on every execute unless
# the text is short enough for its cache (4 096 bytes), and the send's statements are
# longer: a tenth of a send's time went to that parse. A statement with named
# placeholders is turned into PostgreSQL's own ($1, $2, ...; one number a name, as psycopg
# numbers them) once, and runs on a RawCursor, which sends the text as it is.
_NAMED = re.compile(r"%\((\w+)\)s")
_raw_forms: dict[str, tuple[str, tuple[str, ...]]] = {}


def raw_form(statement: str) -> tuple[str, tuple[str, ...]]:
    """A statement with ``%(name)s`` placeholders as PostgreSQL's ``$n`` text, and the names in ``$n`` order."""
    found = _raw_forms.get(statement)
    if found is None:
        names: list[str] = []

        def numbered(match: re.Match) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        found = _raw_forms[statement] = (_NAMED.sub(numbered, statement), tuple(names))
    return found


def _pg_execute(raw, statement: str, params, *, prepare: bool):
    """Run a statement on the driver's connection: one with named parameters in its
    raw form (``raw_form``), any other as psycopg parses it. Answers the cursor."""
    import psycopg

    if isinstance(params, dict):
        text, names = raw_form(statement)
        cursor, params = psycopg.RawCursor(raw), [params[name] for name in names]
    else:
        cursor, text = psycopg.Cursor(raw), statement
    try:
        cursor.execute(text, params, prepare=prepare)
    except BaseException:
        cursor.close()
        raise
    return cursor


class HotCursor:
    """The driver's own cursor on Django's connection (inside the caller's transaction),
    without Django's cursor wrappers: on PostgreSQL it binds parameters on the
    server and prepares the fixed statements (Django's cursor quotes every
    parameter into the SQL text in Python, a tenth of the hot path's time)."""

    def __init__(self, db):
        self.db = db
        db.ensure_connection()
        self.raw = db.connection
        self.postgres = db.vendor == "postgresql"
        if self.postgres:
            _prepared_statements_on(self.raw)
            self.cursor = None  # the statement's own (``_pg_execute``)
        else:
            self.cursor = self.raw.cursor()
        self.counting = sqlcount.installed()

    def execute(self, statement: str, params, *, prepare: bool = True) -> None:
        if self.counting:
            sqlcount.statement_run(in_transaction=True)
        try:
            if self.postgres:
                if self.cursor is not None:
                    self.cursor.close()
                    self.cursor = None
                self.cursor = _pg_execute(self.raw, statement, params, prepare=prepare)
            else:
                self.cursor.execute(statement, params)
        except Exception:
            self.db.errors_occurred = True  # the writer then closes this connection (mailbox/plumbing/db.py)
            raise

    def fetchone(self):
        return self.cursor.fetchone()

    def __enter__(self) -> "HotCursor":
        return self

    def __exit__(self, *exc) -> None:
        if self.cursor is not None:
            self.cursor.close()


@contextlib.contextmanager
def hot_transaction(batch: Batch):
    """A writer batch's transaction: BEGIN and COMMIT on the driver's connection.

    The jobs run raw statements only, so Django's atomic() (savepoint and
    on-commit bookkeeping, autocommit switching) would add its cost and nothing
    else. Django's connection stays in autocommit between batches, as outside
    any atomic block; a failure rolls back, and marks the connection so the
    writer closes it if it is broken (mailbox/plumbing/db.py)."""
    db = batch.db
    db.ensure_connection()
    raw = db.connection
    try:
        if db.vendor == "postgresql":
            _plans_renewed(raw)
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
    batch.db.ensure_connection()
    raw = batch.db.connection
    _prepared_statements_on(raw)
    _jobs_counted(raw, len(piped))
    counting = sqlcount.installed()
    cursors = []
    try:
        with raw.pipeline():
            for job, (statement, params) in piped:
                cursors.append((job, _pg_execute(raw, statement, params, prepare=True)))
                if counting:
                    sqlcount.statement_run(in_transaction=True)
    except Exception:
        batch.db.errors_occurred = True
        raise
    for job, cursor in cursors:
        job.error = None
        try:
            job.piped_result(cursor.fetchone(), batch)
        except TeamError as exc:  # a refusal wrote nothing (or undid what it wrote)
            job.error = exc
        finally:
            cursor.close()
    done = {id(job) for job, _ in piped}
    return [job for job in jobs if id(job) not in done]


def batch_flush(batch: Batch) -> None:
    """What a batch's jobs left for its end, in one statement each before the commit: the
    Lead-log records, in the order the jobs appended them, and the results of
    the idempotency keys its sends claimed; when the process traces, the trace context of
    the messages its sends stored (a statement a message, in the pipeline on PostgreSQL)."""
    sql = statements(batch.db)
    if batch.log_rows:
        statement, params = rows_insert(sql.log_insert_head, sql.log_row, batch.log_rows, batch.now_db)
        with HotCursor(batch.db) as cursor:
            cursor.execute(statement, params, prepare=False)
    if batch.key_results:
        params = [value for row in batch.key_results for value in row]
        statement = sql.key_results.replace("{rows}", ", ".join([sql.key_results_row] * len(batch.key_results)))
        with HotCursor(batch.db) as cursor:
            cursor.execute(statement, params, prepare=False)
    if batch.keys_new:
        params = [
            value
            for (member_id, tool, key), (fingerprint, result) in batch.keys_new.items()
            for value in (member_id, tool, key, fingerprint, json.dumps(result), batch.now_db)
        ]
        statement = sql.keys_insert.replace("{rows}", ", ".join([sql.keys_insert_row] * len(batch.keys_new)))
        with HotCursor(batch.db) as cursor:
            cursor.execute(statement, params, prepare=False)
    if batch.traces:
        with HotCursor(batch.db) as cursor:
            for message_id, traceparent, tracestate in batch.traces:
                cursor.execute(sql.message_traced, [traceparent, tracestate, message_id])
