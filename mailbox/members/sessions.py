"""Agent sessions: what happens when one says hello, reports its status and leaves
(on a database thread: ``session_hello``, ``session_status``, ``session_closed``),
and what one connected to this process does with its frames, in order
(``ConnectedSession``, on the event loop, which its websocket feeds).

Human prompts are the Queue adapter's (mailbox/engine/queue_adapter.py): a session's
hello and each idle status offer it the next one, and an idle status ends the
prompt turn under way. Hosts are mailbox/members/hosts.py's, interrupting a turn
mailbox/members/interrupt.py's.
"""
import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Coroutine

from django.db import transaction

from mailbox.engine import budget, delivery, hot_path, lead_log, queue_adapter
from mailbox.members import presence
from mailbox.plumbing import outage, quota, wire
from mailbox.plumbing.db import to_db_thread
from teams.errors import ErrorCode, TeamError
from teams.models import Member, SessionState
from teams.services import member_session_end, member_session_set

log = logging.getLogger(__name__)

# Tool calls one socket may have in flight; more are refused until some finish.
MAX_TOOL_CALLS_IN_FLIGHT = 64


def session_hello(*, member_id: int, state: str, channel: str) -> list[dict]:
    """A session connected: record its state, admit what waits, and return every
    undelivered message for it in seq order (the replay)."""
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        lead_log.member_status_logged(member, previous)
    presence.session_attached(member_id=member_id, channel=channel)
    # Admitted here, steered by the replay below: each undelivered message once. Nothing while
    # the team's token budget is used up: a replay would start a turn (mailbox/engine/budget.py).
    delivery.target_admit(target_id=member_id, redeliver=False, push=False)
    replay = [] if budget.budget_refusal(team_id=member.team_id) else [
        delivery.steer_of(m, target_name=member.name) for m in delivery.undelivered_for(member=member)
    ]
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id, fresh_session=True)
    return replay


def session_status(*, member_id: int, state: str, channel: str) -> Member:
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        lead_log.member_status_logged(member, previous)
        if state == SessionState.IDLE:
            queue_adapter.prompt_turn_ended(member_id=member_id)
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id)
    return member


def session_closed(*, member_id: int, channel: str) -> None:
    with transaction.atomic():
        member = Member.objects.get(pk=member_id)
        previous = member.status
        ended = member_session_end(member_id=member_id, channel=channel)
        if ended is not None:
            lead_log.member_status_logged(ended, previous)
    presence.session_detached(channel=channel)


# --- a session connected to this process ---------------------------------------------------------
class ConnectedSession:
    """An agent session on a websocket of this process, on its event loop: what its frames
    do, and the order their answers go out in. Its websocket (mailbox/transports/consumers.py) parses
    the frames, feeds them here and sends what this ``push``es (``session.frame`` and the
    other events of the consumer, in order).

    It owns:

    - the order of an entry's answers: its ``ack`` (or error) after those of the entries
      before it, a refusal of the history quota in its place among them (the entries go
      to the process's writer without blocking the socket; a status or a hello waits for
      them: ``writes_committed``);
    - the quotas of a session's frames: the history quota (``hot_path.entry_job``),
      at most ``quota.entries_per_request()`` entries waiting for their commit, at most
      ``MAX_TOOL_CALLS_IN_FLIGHT`` tool calls (the token's request rate is charged by the
      websocket, as the edge charges it for REST);
    - the steers sent and not yet reported by an entry (``awaits_entries``: recovery does
      not push again to a session that still holds some, mailbox/plumbing/events.py);
    - the session's hello, status and close (the functions above, on a database thread).

    Registered with mailbox/plumbing/events.py after its hello, it is the ``LocalSession`` pushes
    for its channel are handed to (``push`` is the websocket's)."""

    def __init__(self, *, member: Member, channel: str, push: Callable[[dict], None]):
        self.member = member
        self.channel = channel
        self.push = push
        self.said_hello = False
        self.hello_sent = False  # from here on the session may be attached: close() ends it
        self.writes: collections.deque[asyncio.Future] = collections.deque()  # entry frames not yet committed, in order
        self.entries_in_flight = 0  # the entries of those frames
        self.refused_after: dict[asyncio.Future, list[dict]] = {}  # quota refusals answered after that write's ack
        # Each write's answers pushed: set once _entries_done has run for it (a done write may not be answered yet).
        self.answered_of: dict[asyncio.Future, asyncio.Future] = {}
        self.tool_calls: set[asyncio.Task] = set()
        self.steered: set[str] = set()  # message ids steered to this session, no entry reported yet
        self.write_failed: BaseException | None = None  # the last entry of this socket that could not be stored
        self.write_failures = 0  # how many could not be

    # --- hello, status, close ---------------------------------------------------------------
    async def hello(self, state: str) -> list[dict]:
        """The session says hello (after the entries before it): its replay, every
        undelivered message in seq order, which the websocket steers."""
        await self.writes_committed()
        self.hello_sent = True
        replay = await to_db_thread(session_hello)(member_id=self.member.pk, state=state, channel=self.channel)
        self.said_hello = True
        return replay

    async def status(self, state: str) -> None:
        await self.writes_committed()
        await to_db_thread(session_status)(member_id=self.member.pk, state=state, channel=self.channel)

    async def close(self) -> None:
        """The websocket closed: its tool calls stop, and the session ends if it said hello."""
        for task in list(self.tool_calls):
            task.cancel()
        if self.said_hello or self.hello_sent:
            await to_db_thread(session_closed)(member_id=self.member.pk, channel=self.channel)

    # --- entries: through the writer, answered in commit order -------------------------------
    def entry(self, entry: wire.Entry) -> None:
        """An ``entry`` frame: answered by its ``ack`` (or an ``error`` frame)."""
        self._entries([entry], many=False)

    def entries(self, entries: list["wire.Entry | TeamError"], *, call_id: str | None = None) -> "Carried":
        """An ``entries`` frame: each entry stored or refused as if it came alone (a refusal
        of one stops none of the others; a ``TeamError`` in the list is an entry that did not
        parse), all of them answered in order once the last is committed, the acks of
        consecutive stored ones in one ``acks`` frame. Returns what a tool frame that carried
        them waits for (``Carried``); ``call_id``: that tool frame's, whose ``tool_result``
        may carry their last ``acks`` (a ``session.acks_held`` event: the websocket holds them
        until it sends anything else)."""
        self._entries(entries, many=True, call_id=call_id)
        return Carried(self, list(self.writes))

    def _entries(self, entries: list, *, many: bool, call_id: str | None = None) -> None:
        cap = quota.entries_per_request()
        # Each entry's outcome, in order: its job (answered by the job's future) or its refusal.
        outcomes: list[tuple[str | None, str | None, "hot_path.EntryJob | TeamError"]] = []
        jobs = []
        for entry in entries:
            if isinstance(entry, TeamError):
                outcomes.append((entry.extra.get("entry_id"), None, entry))
                continue
            try:
                if self.entries_in_flight + len(jobs) >= cap:
                    raise quota.too_many_entries(self.entries_in_flight + len(jobs) + 1)
                job = hot_path.entry_job(member=self.member, entry=entry)  # the history quota may refuse it
            except TeamError as exc:  # nothing stored; answered in its turn
                exc.extra["entry_id"] = entry.id
                outcomes.append((entry.id, None, exc))
                continue
            jobs.append(job)
            outcomes.append((entry.id, entry.delivers, job))
        if not jobs:
            frames = self._answers(outcomes, many)
            if self.writes:  # after the answers of the entries before them, as acks are ordered
                self.refused_after.setdefault(self.writes[-1], []).extend(frames)
            else:
                for frame in frames:
                    self.push(frame)
            return
        writes = hot_path.entries_run(jobs)
        done = writes[0] if len(writes) == 1 else asyncio.gather(*writes, return_exceptions=True)
        self.writes.append(done)
        self.answered_of[done] = asyncio.get_running_loop().create_future()
        self.entries_in_flight += len(writes)
        done.add_done_callback(lambda done, o=outcomes, n=len(writes): self._entries_done(done, o, n, many, call_id))

    def _entries_done(self, done: asyncio.Future, outcomes: list, count: int, many: bool,
                      call_id: str | None = None) -> None:
        self.entries_in_flight -= count
        with contextlib.suppress(ValueError):
            self.writes.remove(done)  # the oldest, unless the socket closed meanwhile
        refused_next = self.refused_after.pop(done, ())  # entries refused by the quota right after these
        answered = self.answered_of.pop(done, None)
        if done.cancelled():
            if answered is not None:
                answered.cancel()  # the socket closed: a call waiting on it ends with it
            return
        frames = self._answers(outcomes, many)
        last = frames[-1]["frame"] if frames and frames[-1]["type"] == "session.frame" else None
        if call_id is not None and not refused_next and last is not None and last["type"] == "acks":
            frames[-1] = {"type": "session.acks_held", "id": call_id, "acks": last["acks"]}
        for frame in frames:
            self.push(frame)
        for refusal in refused_next:
            self.push(refusal)
        if answered is not None and not answered.done():
            answered.set_result(None)

    def _answers(self, outcomes: list, many: bool) -> list[dict]:
        """The frames that answer entries, in order: their acks (one ``ack`` frame for an
        ``entry`` frame; one ``acks`` frame for each run of stored entries of an ``entries``
        frame) and each refusal in its place."""
        frames: list[dict] = []
        acks: list[dict] = []

        def acks_out() -> None:
            if acks:
                frame = {"type": "acks", "acks": list(acks)} if many else {"type": "ack", **acks[0]}
                frames.append({"type": "session.frame", "frame": frame})
                acks.clear()

        for entry_id, message_id, outcome in outcomes:
            write = None if isinstance(outcome, TeamError) else outcome.future
            if write is not None and write.cancelled():
                continue  # the socket closed under it
            exc = outcome if write is None else write.exception()
            if exc is None:
                self.steered.discard(message_id)
                acks.append(hot_path.entry_ack(entry_id, write.result()))
                continue
            acks_out()
            frames.append(self._entry_refusal(entry_id, exc))
        acks_out()
        return frames

    def _entry_refusal(self, entry_id: str | None, exc: BaseException) -> dict:
        if isinstance(exc, TeamError):
            return {"type": "session.frame", "frame": {"type": "error", **exc.as_wire()}}
        self.write_failed = exc  # a tool call carried with it, or after it unanswered, is not made (Carried)
        self.write_failures += 1
        if outage.noted(exc, "an entry") is not None:
            return {"type": "session.unavailable", "entry_id": entry_id}
        log.warning("storing an entry of %s failed", self.member, exc_info=exc)
        return {"type": "session.frame", "frame": {
            "type": "error", "error": {"code": str(ErrorCode.SERVER_ERROR), "message": "Storing that entry failed; send it again."},
        }}

    async def writes_committed(self) -> None:
        while self.writes:
            await asyncio.wait([self.writes[0]])

    # --- tool calls -----------------------------------------------------------------------------
    def tool_calls_full(self) -> TeamError | None:
        """The refusal of one more tool call while ``MAX_TOOL_CALLS_IN_FLIGHT`` are in flight."""
        if len(self.tool_calls) < MAX_TOOL_CALLS_IN_FLIGHT:
            return None
        return TeamError(
            ErrorCode.VALIDATION_ERROR,
            f"At most {MAX_TOOL_CALLS_IN_FLIGHT} tool calls may be in flight on one socket; wait for some results.",
        )

    def tool_call_start(self, call: Coroutine) -> None:
        """Run a tool call (which pushes its own answer) beside the next frames, counted in flight."""
        task = asyncio.ensure_future(call)
        self.tool_calls.add(task)
        task.add_done_callback(self.tool_calls.discard)

    # --- steers -----------------------------------------------------------------------------------
    def steer_sent(self, message_id: str) -> None:
        self.steered.add(message_id)

    def awaits_entries(self) -> bool:
        return bool(self.steered)


class Carried:
    """What a tool frame that carries entries waits for before its call runs: those entries
    and every entry this socket sent before them answered (committed, or refused)."""

    __slots__ = ("session", "writes", "failures")

    def __init__(self, session: ConnectedSession, writes: list[asyncio.Future]):
        # Not the writes themselves: a write is done a loop turn before its answers are pushed
        # (and a failure counted), and the call waits for those.
        self.session = session
        self.writes = [session.answered_of[w] for w in writes if w in session.answered_of]
        # A failure already answered when the call came is not its own: the session was told.
        self.failures = session.write_failures

    async def answered(self) -> BaseException | None:
        """Once they are: None, or the failure of one that could not be stored (the database
        out of reach, or a bug): then the call must not be made."""
        for answered in self.writes:  # most are done already: no waiter for those
            if not answered.done():
                await answered  # cancelled with its socket, it ends this call with it
        return self.session.write_failed if self.session.write_failures > self.failures else None
