"""The send and deliver transitions: the only code that stores a team message or records
its delivery (docs/delivery.md, "Who writes what").

Each is a writer job (mailbox/plumbing/writer.py) whose SQL is mailbox/engine/hot_sql.py's:

- ``SendJob``: a message stored with its ``queued`` record; for a running or idle target
  with nothing queued before it, admitted in the same commit (its ``accepted`` record)
  and pushed after it; any other send is admitted by ``delivery.target_admit`` after the
  commit; a send that finds the message must wait (its target without a session and without
  a host, or the team's budget used up) records that try and why (attempts 1,
  ``last_error``, a waiting ``failed`` record) in the same statement. A send with an idempotency key claims the key in the same statement (a replay
  answers the first call's result, a different call with the key is refused, a refused
  send does not use the key up: mailbox/engine/idempotency.py).
- ``EntryJob``: one history entry (a repeat folds); a team message's entry marks it
  delivered in the same commit. ``EntriesJob``: several, in order, up to the first
  refused (REST's and an MCP inbox read's).
- ``DeliveredJob``: the ``delivered`` mark alone, for an entry already stored (recovery).

The async entry points (``message_send``, ``entry_submit``, ``entries_run``, ``entries_submit``) queue a
job on the process's writer and await its commit; the transports (REST, the websocket's
tool and entry frames, /mcp) all come here. The sync ones (``message_store``,
``message_send_now``, ``entry_record``, ``messages_mark_delivered``) run the same jobs on
the calling thread, in its transaction, for the writes that are not hot: a spawn
prompt stored with its roster entry, recovery, management commands and tests.
"""
import asyncio
import json
import logging
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mailbox.engine import budget, hot_sql, idempotency, queue_adapter
from mailbox.engine.answers import observation, send_answer, send_answer_now
from mailbox.plumbing.db import to_db_thread, writer
from mailbox.engine.delivery import (
    mailbox_full, message_admit_stored, message_validate, no_host_reason, not_addressed, not_received, refuse_phase,
    spawn_prompt_validate, unknown_target,
)
from mailbox.engine.lead_log import accepted_record, delivered_record, failed_record, queued_record
from mailbox.models import (
    TARGET_SESSIONLESS_STATUSES, IdempotencyRecord, LogKind, MessageKind, MessageState, TeamMessage, message_id_new,
)
from mailbox.plumbing import events, faults, log_context, metrics, quota, tracing, wire
from mailbox.plumbing import writer as _writer
from mailbox.plumbing.wire import steer_message
from teams.errors import TeamError
from teams.models import Member, Status, status_of

log = logging.getLogger(__name__)

_ADMISSION_FAULTS = ("inspection", "admission", "push")
# Why a message waits while its team's budget is used up, the numbers left for the statement.
_BUDGET_REASON = budget.exhausted_reason(used="{used}", tokens="{tokens}")
SEND_TOOL = "send_message"


def _refuse_target(cursor, *, team_id: int, target_name: str) -> None:
    """The target claim matched no row: say why (nothing was stored)."""
    sql = hot_sql.statements(cursor.db)
    cursor.execute(sql.target_refusal, [team_id, target_name])
    row = cursor.fetchone()
    if row is None:
        raise unknown_target(target_name)
    refuse_phase(Member(name=target_name, phase=row[1]))
    cursor.execute(sql.target_pending, [row[0]])
    raise mailbox_full(target_name, cursor.fetchone()[0])


def _stored(result) -> dict:
    """A key's stored result as the driver returns it (JSON text on SQLite)."""
    return json.loads(result) if isinstance(result, str) else dict(result or {})


class SendJob(_writer.Job):
    """Store one message (admitting it for a running or idle target with nothing queued)."""

    # The send span's W3C context (traceparent, tracestate) when the process traces: stored
    # with the message by the batch (hot_sql.batch_flush) and carried in its steer frames.
    trace: tuple[str, str | None] | None = None

    def __init__(
        self, *, sender: Member, target_name: str, content: str, reply_to: str = "", kind: str = MessageKind.MESSAGE,
        key: str | None = None, fingerprint: str = "", may_admit: bool = True, records_wait: bool = True,
    ):
        super().__init__()
        if kind == MessageKind.MESSAGE:
            message_validate(sender=sender, target_name=target_name, content=content)
        self.sender = sender
        self.target_name = target_name
        self.content = content
        self.reply_to = reply_to
        self.kind = kind
        self.key, self.fingerprint = key, fingerprint
        self.key_id: int | None = None  # PostgreSQL: the key's row, once claimed
        self.key_claimed = False
        self.replayed: dict | None = None  # a keyed call made before: its stored result
        self.message_id = message_id_new()
        self.may_admit = may_admit and not faults.armed(_ADMISSION_FAULTS)
        # A send that finds the message must wait (no session and no host, or the team's
        # budget used up) records that try and why (docs/delivery.md); a message stored
        # without being sent (a spawn prompt) tried nothing, and an armed fault's failure is
        # admission's to count.
        self.records_wait = records_wait and not faults.armed(_ADMISSION_FAULTS)
        self.admitted = False
        self.waits = ""  # why the message waits, when the send found that it does (SQLite; PostgreSQL's statement logs it)
        self.waited = False  # PostgreSQL: the statement recorded the send's wait (its failed record)
        self.thread_id = ""
        self.lock_order = (1, sender.team_id, target_name)
        self.started, self.transport = time.monotonic(), metrics.transport.get()

    # --- PostgreSQL: one statement -----------------------------------------------------------
    def piped(self, batch) -> tuple[str, dict] | None:
        """The job as one statement that needs no other's answer (PostgreSQL), or None
        (a reply first looks up its thread: ``execute`` runs it)."""
        sql = hot_sql.statements(batch.db)
        if not sql.send_piped or self.reply_to:
            return None
        return self._statement(sql, batch)

    def _statement(self, sql, batch) -> tuple[str, dict]:
        params = {
            "team": self.sender.team_id, "target": self.target_name, "limit": settings.STEERBOARD["MAX_PENDING_PER_TARGET"],
            "may": self.may_admit, "id": self.message_id, "sender": self.sender.pk, "sender_name": self.sender.name,
            "content": self.content, "thread": self.thread_id, "reply_to": self.reply_to, "kind": self.kind,
            "now": batch.now, "budget": settings.STEERBOARD["TEAM_TOKEN_BUDGET"], "records_wait": self.records_wait,
            "budget_reason": _BUDGET_REASON,
            **{
                hot_sql.wait_param(status): no_host_reason(target=self.target_name, status=status)
                for status in TARGET_SESSIONLESS_STATUSES
            },
        }
        if not self.key:
            return sql.send_piped, params
        params.update(
            key=self.key, tool=SEND_TOOL, fingerprint=self.fingerprint, expired=batch.now - idempotency.window(),
            claimed=json.dumps({"message_id": self.message_id, "thread_id": self.thread_id or self.message_id}),
        )
        return sql.send_piped_keyed, params

    def piped_result(self, row, batch) -> None:
        if self.key:
            target, key_id, prior_fingerprint, prior_result = row[:8], row[8], row[9], row[10]
            if key_id is None:  # the key was used before: replay or refuse, nothing stored
                self._key_used(batch, prior_fingerprint, prior_result)
                return
            self.key_id, self.key_claimed = key_id, True
            if target[0] is None:  # refused: the claim goes too, so a retry runs again
                with hot_sql.HotCursor(batch.db) as cursor:
                    cursor.execute(hot_sql.statements(batch.db).key_undo, [key_id])
            row = target if target[0] is not None else None
        if row is None:
            with hot_sql.HotCursor(batch.db) as cursor:
                _refuse_target(cursor, team_id=self.sender.team_id, target_name=self.target_name)
        self.target_id, self.seq, phase, session_state, self.channel, has_host, self.admitted, exhausted = row
        self.target_status = status_of(phase, session_state)
        self.has_host = bool(has_host)
        # What the statement's waiting failed record was written for (hot_sql.py, ``waits``).
        self.waited = self.records_wait and bool(
            exhausted or (self.target_status in TARGET_SESSIONLESS_STATUSES and not self.has_host)
        )
        self._answered(batch)

    def _answered(self, batch) -> None:
        """The message is stored: its answer, and what the batch writes with it at its end
        (the send's trace context, the claimed key's answer)."""
        self.created_at = batch.now
        self.answer = self._answer()
        if self.trace is not None:
            batch.traced(self.message_id, *self.trace)
        if self.key_id is not None:
            batch.key_result(self.key_id, json.dumps(self.answer))
        elif self.key:  # SQLite: claimed now, in memory; its row goes in with the batch's end
            self.key_claimed = True
            batch.key_new(self.sender.pk, SEND_TOOL, self.key, self.fingerprint, self.answer)

    def _key_used(self, batch, fingerprint: str | None, result) -> None:
        if fingerprint is None:  # another transaction committed the key after this statement began
            with hot_sql.HotCursor(batch.db) as cursor:
                found = self._key_found(cursor, batch)
            if found is None:
                raise idempotency.key_in_use(self.key)
            fingerprint, result = found[1], found[2]
        if fingerprint != self.fingerprint:
            raise idempotency.key_conflict(self.key, SEND_TOOL, persisted=False)  # as the send's every refusal (delivery.py)
        self.replayed = _stored(result)

    def _key_found(self, cursor, batch):
        sql = hot_sql.statements(batch.db)
        if batch.keys_live_since is None:  # once a batch: the window's start, as the database stores it
            batch.keys_live_since = batch.db.ops.adapt_datetimefield_value(batch.now - idempotency.window())
        cursor.execute(sql.key_find, [self.sender.pk, SEND_TOOL, self.key, batch.keys_live_since])
        return cursor.fetchone()

    # --- any database: one statement at a time -----------------------------------------------
    def execute(self, batch) -> None:
        sender, sql = self.sender, hot_sql.statements(batch.db)
        now = batch.now_db
        self.key_id, self.key_claimed = None, False  # a batch run again runs its jobs afresh
        with hot_sql.HotCursor(batch.db) as cursor:
            self.thread_id = ""
            if self.reply_to:
                cursor.execute(sql.reply_thread, [self.reply_to, sender.team_id, sender.pk])
                row = cursor.fetchone()
                if row is None:
                    raise not_received(self.reply_to)
                self.thread_id = row[1] or row[0]
            if sql.send_piped:  # PostgreSQL: the same one statement a pipelined batch sends
                cursor.execute(*self._statement(sql, batch))
                self.piped_result(cursor.fetchone(), batch)
                return
            if self.key:  # SQLite: a live key (claimed earlier in this batch, or stored) is replayed or refused
                claimed = batch.keys_new.get((sender.pk, SEND_TOOL, self.key))
                if claimed is None and (found := self._key_found(cursor, batch)) is not None:
                    claimed = found[1:]  # (fingerprint, result)
                if claimed is not None:  # nothing stored
                    self._key_used(batch, *claimed)
                    return
            cursor.execute(sql.target_claim, [
                sender.team_id, self.target_name, settings.STEERBOARD["MAX_PENDING_PER_TARGET"],
                settings.STEERBOARD["TEAM_TOKEN_BUDGET"],
            ])
            row = cursor.fetchone()
            if row is None:  # refused: the key stays unclaimed, so a retry runs again
                _refuse_target(cursor, team_id=sender.team_id, target_name=self.target_name)
            self.target_id, self.seq, phase, session_state, self.channel, queued_before, has_host, exhausted = row
            self.target_status = status_of(phase, session_state)
            self.has_host = bool(has_host)
            # Admission here only when it is a push: every earlier message of this target
            # is already accepted (none queued), so seq order holds; and never into a team
            # whose token budget is used up (target_admit then says why it waits).
            self.admitted = (
                self.may_admit and self.target_status in (Status.RUNNING, Status.IDLE) and not queued_before
                and not exhausted
            )
            # The team's budget is used up, or no session and no host to resume it: the message
            # waits, and this send was its try (the same words as admission's).
            self.waits = ""
            if self.records_wait and exhausted:
                cursor.execute(sql.budget_reason, [
                    _BUDGET_REASON, sender.team_id, settings.STEERBOARD["TEAM_TOKEN_BUDGET"], sender.team_id,
                ])
                self.waits = cursor.fetchone()[0]
            elif self.records_wait and self.target_status in TARGET_SESSIONLESS_STATUSES and not has_host:
                self.waits = no_host_reason(target=self.target_name, status=self.target_status)
            state = MessageState.ACCEPTED if self.admitted else MessageState.QUEUED
            cursor.execute(
                sql.message_insert,
                [
                    self.message_id, sender.team_id, sender.pk, self.target_id, self.content, self.seq,
                    self.thread_id, self.reply_to, self.kind, state, 1 if self.admitted or self.waits else 0, self.waits,
                    now, now, now if self.admitted else None,
                ],
            )
            self._answered(batch)
        self._log(batch)

    def _log(self, batch) -> None:
        sender = self.sender
        batch.log(
            team_id=sender.team_id, kind=LogKind.MESSAGE_QUEUED, message_id=self.message_id,
            data=json.dumps(queued_record(sender=sender.name, target=self.target_name, seq=self.seq)),
        )
        if self.admitted:
            batch.log(
                team_id=sender.team_id, kind=LogKind.MESSAGE_ACCEPTED, message_id=self.message_id,
                data=json.dumps(
                    accepted_record(
                        target=self.target_name, seq=self.seq, target_status=self.target_status, redelivery=False
                    )
                ),
            )
        if self.waits:
            batch.log(
                team_id=sender.team_id, kind=LogKind.MESSAGE_FAILED, message_id=self.message_id,
                data=json.dumps(failed_record(target=self.target_name, seq=self.seq, error=self.waits, waiting=True)),
            )

    # --- after the commit --------------------------------------------------------------------
    def committed(self) -> None:
        if self.replayed is None:
            metrics.message_sent(
                team_id=self.sender.team_id, via=self.transport, admitted=self.admitted, started=self.started,
                waited=self.waited or bool(self.waits),
            )
        if self.admitted:  # otherwise message_admit_stored reaches the point, before its admission
            faults.crash_point("after_queued_commit")

    def wire(self) -> dict:
        return steer_message(
            id=self.message_id, sender=self.sender.name, target=self.target_name, content=self.content,
            seq=self.seq, created_at=self.created_at, thread_id=self.thread_id, kind=self.kind, trace=self.trace,
        )

    def rings(self) -> list[tuple[int, str, dict]]:
        if self.replayed is not None:
            return []
        return [(self.sender.team_id, "message", {"target": self.target_name})]

    def finish(self) -> None:
        if self.admitted:
            events.session_push(self.channel, {"type": "session.steer", "message": self.wire()})
            faults.crash_point("after_admission")
        _rings_now(self)

    def _answer(self) -> dict:
        """What the sender is told (and a keyed call's key keeps): the whole answer for a send
        admitted here; its ids for one admitted after the commit (its answer then follows)."""
        if not self.admitted:
            return {"message_id": self.message_id, "thread_id": self.thread_id or self.message_id}
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


# An entry's result: True (stored), False (folded: already in the history), or this: it names a
# message an operator cancelled, and records nothing (its acknowledgement says so).
ENTRY_CANCELLED = "cancelled"


def entry_ack(entry_id: str, result) -> dict:
    """What an entry's acknowledgement says (websocket ``ack``, REST ``acks``)."""
    ack = {"entry_id": entry_id, "folded": result is not True}
    if result == ENTRY_CANCELLED:
        ack["cancelled"] = True
    return ack


class EntryJob(_writer.Job):
    """Store one history entry (a repeat folds); a team message's entry marks it delivered in the
    same commit; the entry of a cancelled message records nothing."""

    def __init__(self, *, member: Member, entry: wire.Entry):
        super().__init__()
        self.member = member
        self.entry_id, self.kind = entry.id, entry.kind
        self.message_id = entry.delivers
        self.prompt_id = queue_adapter.prompt_started_by(entry)
        stored = entry.stored_json()
        self.size = len(stored)  # bytes, for the history quota
        self.data = stored.decode()
        self.usage = entry.usage
        self.delivered = False
        self.queued_at = None  # the delivered message's, for the send-to-delivered latency
        self.marked = None  # its delivered row: seq, queued_at (and, traced, accepted_at, traceparent, tracestate)

    def execute(self, batch) -> None:
        sql = hot_sql.statements(batch.db)
        if sql.entry_piped:  # PostgreSQL: the same one statement a pipelined batch sends
            statement, params = self.piped(batch)
            with hot_sql.HotCursor(batch.db) as cursor:
                cursor.execute(statement, params)
                self.piped_result(cursor.fetchone(), batch)
            return
        member, now = self.member, batch.now_db
        self.delivered = False
        with hot_sql.HotCursor(batch.db) as cursor:
            cursor.execute(
                sql.entry_insert, [member.pk, self.entry_id, self.kind, self.message_id, self.prompt_id, self.data, now]
            )
            found = cursor.fetchone()
            inserted = found[0] if found else None
            if inserted is not None and self.usage is not None:
                usage = self.usage
                cursor.execute(sql.usage_add, [
                    member.pk, usage.model, usage.input_tokens, usage.output_tokens, usage.cached_tokens, now,
                ])
            if self.message_id and not self._delivered_deferred():
                self.marked = marked = _delivered(cursor, batch, member=member, message_id=self.message_id)
                self.delivered = marked is not None
                self.queued_at = marked[1] if marked else None
            self.result = inserted is not None
            if self.message_id and not self.delivered:  # folded, deferred, cancelled, or not this member's
                cursor.execute(sql.message_state, [self.message_id, member.pk])
                state = cursor.fetchone()
                if state is None:
                    self._not_mine(cursor, inserted)
                if state[0] == MessageState.CANCELLED:  # the batch holds the write lock: no cancel interleaves
                    if inserted is not None:
                        cursor.execute(sql.entry_undo, [inserted])
                    self.result = ENTRY_CANCELLED
            if self.prompt_id:
                cursor.execute(sql.prompt_started, [now, self.prompt_id, member.pk])

    def piped(self, batch) -> tuple[str, dict] | None:
        sql = hot_sql.statements(batch.db)
        if not sql.entry_piped:
            return None
        self.delivered = False
        member = self.member
        params = {
            "member": member.pk, "entry_id": self.entry_id, "kind": self.kind, "message": self.message_id,
            "prompt": self.prompt_id, "data": self.data, "now": batch.now, "team": member.team_id,
            "name": member.name, "mark": bool(self.message_id) and not self._delivered_deferred(),
        }
        if self.usage is None:
            return sql.entry_piped_traced if tracing.enabled else sql.entry_piped, params
        usage = self.usage
        params.update(model=usage.model, input=usage.input_tokens, output=usage.output_tokens,
                      cached=usage.cached_tokens)
        return sql.entry_piped_usage_traced if tracing.enabled else sql.entry_piped_usage, params

    def piped_result(self, row, batch) -> None:
        inserted, seq, state, self.queued_at = row[:4]
        self.delivered = seq is not None
        self.marked = (seq, *row[3:]) if self.delivered else None
        if self.message_id and state is None:
            with hot_sql.HotCursor(batch.db) as cursor:
                self._not_mine(cursor, inserted)
        # A cancelled message's entry was not stored (the statement locked the message first).
        self.result = ENTRY_CANCELLED if self.message_id and state == MessageState.CANCELLED else inserted is not None

    def _not_mine(self, cursor, inserted: int | None) -> None:
        """The entry names a message never addressed to this member: store nothing, refuse."""
        if inserted is not None:
            cursor.execute(hot_sql.statements(cursor.db).entry_undo, [inserted])
        raise not_addressed(self.message_id)

    def _delivered_deferred(self) -> bool:
        try:
            faults.inject("delivered_record")
        except faults.TemporaryDeliveryError:
            # The entry is durable; recovery (reconcile, or the session's next report) writes delivered.
            log.warning("delivered record for %s deferred to recovery", self.message_id,
                        extra={"message_id": self.message_id, **log_context.of_member(self.member)})
            return True
        return False

    def committed(self) -> None:
        if self.delivered:
            metrics.message_delivered(team_id=self.member.team_id, queued_at=self.queued_at)
            if tracing.enabled:
                _delivery_traced(self.member, self.message_id, self.marked)
        faults.crash_point("after_entry")

    def rings(self) -> list[tuple[int, str, dict]]:
        team_id, name = self.member.team_id, self.member.name
        rings = []
        if self.delivered:
            rings.append((team_id, "message", {"target": name}))
        elif self.result is True:
            rings.append((team_id, "usage" if self.usage is not None else "entry", {"member": name}))
        if self.prompt_id:
            rings.append(queue_adapter.prompt_ring(team_id=team_id, member_name=name))
        return rings

    def finish(self) -> None:
        _rings_now(self)
        if self.usage is not None and self.result is True:
            _budget_check(self.member.team_id)


class EntriesJob(_writer.Job):
    """Several entries of one member, in order, up to the first one refused: its result is
    the acknowledgements of those stored (``{"entry_id", "folded"}``) and the refusal, if any
    (the entries before it stay stored)."""

    def __init__(self, *, member: Member, entries: list[wire.Entry]):
        super().__init__()
        self.steps = [EntryJob(member=member, entry=entry) for entry in entries]
        self.done: list[EntryJob] = []

    def execute(self, batch) -> None:
        self.done, refusal = [], None
        for step in self.steps:
            try:
                step.execute(batch)
            except TeamError as exc:
                refusal = exc
                break
            self.done.append(step)
        self.result = ([entry_ack(s.entry_id, s.result) for s in self.done], refusal)

    def committed(self) -> None:
        for step in self.done:
            step.committed()

    def rings(self) -> list[tuple[int, str, dict]]:
        rings = []
        for step in self.done:
            rings += [ring for ring in step.rings() if ring not in rings]
        return rings

    def finish(self) -> None:
        _rings_now(self)
        if any(step.usage is not None and step.result is True for step in self.done):
            _budget_check(self.steps[0].member.team_id)


class DeliveredJob(_writer.Job):
    """Mark a message delivered whose entry its target's history already holds (recovery)."""

    def __init__(self, *, team_id: int, target_id: int, target_name: str, message_id: str):
        super().__init__()
        self.target = Member(pk=target_id, team_id=team_id, name=target_name)
        self.message_id = message_id

    def execute(self, batch) -> None:
        with hot_sql.HotCursor(batch.db) as cursor:
            self.marked = marked = _delivered(cursor, batch, member=self.target, message_id=self.message_id)
        self.result = marked is not None
        self.queued_at = marked[1] if marked else None

    def committed(self) -> None:
        if self.result:
            metrics.message_delivered(team_id=self.target.team_id, queued_at=self.queued_at)
            if tracing.enabled:
                _delivery_traced(self.target, self.message_id, self.marked)

    def rings(self) -> list[tuple[int, str, dict]]:
        return [(self.target.team_id, "message", {"target": self.target.name})] if self.result else []


def _delivered(cursor, batch, *, member: Member, message_id: str) -> tuple | None:
    """``delivered`` for a pending message of ``member`` whose entry its history holds, with
    its record: the message's (seq, queued_at), and when the process traces its (accepted_at,
    traceparent, tracestate) too; None when it is not (already delivered, or no such entry)."""
    sql = hot_sql.statements(batch.db)
    now = batch.now_db
    statement = sql.mark_delivered_traced if tracing.enabled else sql.mark_delivered  # the span's columns too
    cursor.execute(statement, [now, now, message_id, member.pk, member.pk, message_id])
    marked = cursor.fetchone()
    if marked is None:
        return None
    batch.log(
        team_id=member.team_id, kind=LogKind.MESSAGE_DELIVERED, message_id=message_id,
        data=json.dumps(delivered_record(target=member.name, seq=marked[0])),
    )
    return marked


def _delivery_traced(member: Member, message_id: str, marked: tuple) -> None:
    """The delivered message's span (mailbox/plumbing/tracing.py), from its delivered row (the traced
    statement's: a row marked before tracing was turned on has no trace columns)."""
    if len(marked) < 5:
        return
    seq, queued_at, accepted_at, traceparent, tracestate = marked
    try:
        tracing.delivered(member=member, message_id=message_id, seq=seq, queued_at=queued_at,
                          accepted_at=accepted_at, traceparent=traceparent, tracestate=tracestate)
    except Exception:  # a span is never worth a delivery's commit
        log.warning("the span of delivering %s failed", message_id, exc_info=True)


_budget_checks: set[asyncio.Task] = set()


def _budget_check(team_id: int) -> None:
    """On the event loop, after an entry reporting usage committed: if that used the team's
    budget up, the turns under way stop after their step (mailbox/engine/budget.py)."""
    task = asyncio.ensure_future(to_db_thread(budget.turns_stopped)(team_id=team_id))
    _budget_checks.add(task)
    task.add_done_callback(_budget_check_done)


def _budget_check_done(task: asyncio.Task) -> None:
    _budget_checks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("checking the team's budget failed", exc_info=task.exception())


def _rings_now(job) -> None:
    """On the event loop, after the commit: the job's dashboard doorbells."""
    for team_id, kind, data in job.rings():
        events.dashboard_ring(team_id, {"type": "team.changed", "kind": kind, **data})


# --- the transports' entry points: through the process's writer ----------------------------------
async def message_send(
    *, sender: Member, target_name: str, content: str, reply_to: str = "", key: str | None = None,
    fingerprint: str = "",
) -> dict:
    """send_message: the sender's answer (docs/protocol.md). ``key``: the call's idempotency
    key, ``fingerprint`` its arguments' (mailbox/engine/idempotency.py)."""
    if key:
        idempotency.prune_soon()
    job = SendJob(sender=sender, target_name=target_name, content=content, reply_to=reply_to, key=key,
                  fingerprint=fingerprint)
    with tracing.send_span(sender=sender, target=target_name) as span:
        job.trace = tracing.carrier(span)
        await writer().run(job)
        replayed = job.replayed is not None
        tracing.sent(span, message_id=job.replayed["message_id"] if replayed else job.message_id,
                     thread_id=job.replayed.get("thread_id", "") if replayed else job.thread_id,
                     seq=getattr(job, "seq", None), admitted=job.admitted, replayed=replayed)
        if replayed:
            if "delivery" in job.replayed:
                return {**job.replayed, "idempotent_replay": True}
            return await to_db_thread(_replayed_now)(job.replayed)
        if job.admitted:
            return job.answer
        # Anything but a plain push (a resume, a target with messages queued before this
        # one, a test's armed fault) is admitted by target_admit, as before.
        answer = await to_db_thread(_admit_and_answer)(job)
        if span is not None and answer.get("status") == "accepted":
            span.add_event("accepted")
        return answer


def _admit_and_answer(job: SendJob) -> dict:
    state, admission = message_admit_stored(message_id=job.message_id, target_id=job.target_id)
    answer = send_answer(
        message_id=job.message_id, thread_id=job.thread_id, team_id=job.sender.team_id, target_name=job.target_name,
        state=state, admission=admission,
    )
    if job.key_claimed:  # the key now replays the whole answer
        IdempotencyRecord.objects.filter(member_id=job.sender.pk, tool=SEND_TOOL, key=job.key).update(result=answer)
    return answer


def _replayed_now(stored: dict) -> dict:
    """A replay whose first call has not finished admission: answer what is known now."""
    result = send_answer_now(message_id=stored["message_id"])
    result["delivery"]["warnings"].append("The first call with this key was still being admitted; do not resend.")
    return {**result, "idempotent_replay": True}


def entry_job(*, member: Member, entry: wire.Entry) -> "EntryJob":
    """An entry's job, its size charged to the member's history quota: raises TeamError at
    once, storing nothing, when the quota refuses it (mailbox/plumbing/quota.py: in memory, no SQL)."""
    job = EntryJob(member=member, entry=entry)
    quota.entry_charge(member_id=member.pk, size=job.size)
    return job


def entries_run(jobs: list["EntryJob"]) -> list[asyncio.Future]:
    """Entry jobs through the writer, queued together in order (one wake-up of its thread):
    a future each of whether its entry was new (False: folded)."""
    return writer().run_all(jobs)


def entry_submit(*, member: Member, entry: wire.Entry) -> asyncio.Future:
    """An entry through the writer: a future of whether the entry was new (False: folded).
    Raises TeamError at once, storing nothing, when the member's history quota refuses it."""
    return writer().run(entry_job(member=member, entry=entry))


async def entries_submit(*, member: Member, entries: list[wire.Entry]) -> tuple[list[dict], TeamError | None]:
    """Several entries through the writer, in order, in one commit: the acknowledgements of
    those stored and the refusal that stopped the rest, if one did."""
    return await writer().run(EntriesJob(member=member, entries=entries))


# --- the same jobs on the calling thread, for the writes that are not hot ----------------------
def run_now(job: _writer.Job):
    """Run a job on this thread's connection, in the caller's transaction (or one of its
    own); its dashboard doorbells ring after the commit. Answers its result."""
    with transaction.atomic():
        batch = _writer.Batch(timezone.now())
        job.execute(batch)
        hot_sql.batch_flush(batch)
        transaction.on_commit(job.committed)
        for team_id, kind, data in job.rings():
            events.dashboard_notify(team_id, kind, **data)
    return job.result


def message_store(
    *, sender: Member, target_name: str, content: str, reply_to: str = "", kind: str = MessageKind.MESSAGE
) -> TeamMessage:
    """A message stored with its ``queued`` record and not admitted: a spawn prompt (stored
    with its roster entry, delivered once a host started the teammate), and tests."""
    if kind == MessageKind.SPAWN_PROMPT:
        spawn_prompt_validate(content)
    job = SendJob(sender=sender, target_name=target_name, content=content, reply_to=reply_to, kind=kind,
                  may_admit=False, records_wait=False)
    run_now(job)
    return TeamMessage.objects.select_related("sender", "target").get(pk=job.message_id)


def message_send_now(*, sender: Member, target_name: str, content: str, reply_to: str = "") -> dict:
    """send_message on this thread (management commands, tests, the benches' in-process probe):
    stored, then admitted; the sender's answer."""
    job = SendJob(sender=sender, target_name=target_name, content=content, reply_to=reply_to, may_admit=False)
    run_now(job)
    return _admit_and_answer(job)


def entry_record(*, member: Member, entry: dict | wire.Entry) -> bool | str:
    """One history entry on this thread; whether it was new (False: folded; ENTRY_CANCELLED:
    it names a cancelled message and recorded nothing)."""
    entry = entry if isinstance(entry, wire.Entry) else wire.Entry.model_validate(entry)
    return run_now(EntryJob(member=member, entry=entry))


def messages_mark_delivered(*, messages) -> int:
    """``delivered`` for each of these messages (``(message id, target id, target name,
    team id)``) whose entry its target's history holds; how many were marked (recovery)."""
    return sum(
        bool(run_now(DeliveredJob(team_id=team_id, target_id=target_id, target_name=name, message_id=message_id)))
        for message_id, target_id, name, team_id in messages
    )
