"""The hot path: the delivery state machine's send and entry transitions as raw SQL
(its statements are in mailbox/hot_sql.py), group-committed by the writer
(mailbox/writer.py).

``delivery.message_send`` + ``delivery.target_admit`` and ``delivery.entry_record`` +
``delivery.message_mark_delivered`` are the reference; the jobs below make the same
rows in fewer statements (tests/mailbox/test_hot_path.py compares the two). A send to
a running or idle target with nothing queued before it is enqueued *and* admitted in
one transaction (its `queued` and `accepted` records together) and pushed after the
commit; any other send is enqueued here and admitted by ``target_admit`` after the
commit, exactly as before. An entry and its `delivered` record commit together.
"""
import asyncio
import json
import logging

from django.conf import settings

from mailbox import events, faults, hot_sql, quota
from mailbox import writer as _writer
from mailbox.answers import observation, send_answer
from mailbox.db import to_db_thread, writer
from mailbox.delivery import message_admit_enqueued, message_validate, refuse_phase
from mailbox.lead_log_records import accepted_record, delivered_record, queued_record
from mailbox.models import (
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


def _refuse_target(cursor, *, team_id: int, target_name: str) -> None:
    sql = hot_sql.statements(cursor.db)
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
        sender, sql = self.sender, hot_sql.statements(batch.db)
        now = batch.now_db
        with hot_sql.HotCursor(batch.db) as cursor:
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

    def piped(self, batch) -> tuple[str, dict] | None:
        """The job as one statement that needs no other's answer (PostgreSQL), or None
        (a reply first looks up its thread: ``execute`` runs it)."""
        sql = hot_sql.statements(batch.db)
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
            with hot_sql.HotCursor(batch.db) as cursor:
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
        sql = hot_sql.statements(batch.db)
        if sql.entry_piped:  # PostgreSQL: the same one statement a pipelined batch sends
            statement, params = self.piped(batch)
            with hot_sql.HotCursor(batch.db) as cursor:
                cursor.execute(statement, params)
                self.piped_result(cursor.fetchone(), batch)
            return
        member, now = self.member, batch.now_db
        self.delivered = False
        mark = bool(self.message_id) and not self._delivered_deferred()
        with hot_sql.HotCursor(batch.db) as cursor:
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
                    data=json.dumps(delivered_record(target=member.name, seq=seq)),
                )
            elif self.message_id:  # folded, deferred, or not this member's message at all
                cursor.execute(sql.message_is_mine, [self.message_id, member.pk])
                if cursor.fetchone() is None:
                    self._not_mine(cursor, inserted)
            if self.prompt_id:
                cursor.execute(sql.prompt_started, [now, self.prompt_id, member.pk])
        self.result = inserted is not None

    def piped(self, batch) -> tuple[str, dict] | None:
        sql = hot_sql.statements(batch.db)
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
            with hot_sql.HotCursor(batch.db) as cursor:
                self._not_mine(cursor, inserted)
        self.result = inserted is not None

    def _not_mine(self, cursor, inserted: int | None) -> None:
        """The entry names a message never addressed to this member: store nothing, refuse."""
        if inserted is not None:
            cursor.execute(hot_sql.statements(cursor.db).entry_undo, [inserted])
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
    job = EntryJob(member=member, entry=entry)
    quota.entry_charge(member_id=member.pk, size=len(job.data))
    return writer().run(job)
