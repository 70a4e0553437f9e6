"""A2A tasks: a caller's message becomes a human prompt through the Queue adapter,
and the task's state is read back from that prompt and the member's history.

The database is the truth, so any server process answers for any task:

| the prompt                                         | the task    |
|----------------------------------------------------|-------------|
| waiting (queued, or its member being started)       | SUBMITTED   |
| its turn started (the history holds its ``prompt``) | WORKING     |
| its turn ended ``done``                             | COMPLETED, the turn's last assistant text the artifact |
| its turn ended ``error``; its member failed to start or was retired | FAILED, with the reason |
| withdrawn while waiting, or its turn ``interrupted`` | CANCELED    |
| its turn runs, and its member asked a person (``ask_human``) in it and waits | INPUT_REQUIRED, the question the status message |

INPUT_REQUIRED is read, never kept: the ask's answer (an operator's, or the caller's
own next message on the task: ``task_answer``) puts the task back to WORKING.

A final state is written on the task row the first time it is read (with the
answer and tool results), so it stays what it was however the history grows
afterwards, and reading it again touches no history. Reading a task that is not
final costs a few index lookups however long the member's history
(mailbox/engine/history.py): its prompt's entry, and whether a turn boundary follows
it; only a turn that has a boundary after its start is read entry by entry
(once, when it ends). ``task_views`` reads many tasks with one lookup of their
prompts' entries (ListTasks, the streams of delegation/streams.py), and a task
is read as a ``TaskRow`` (one query's values, no model instances: a ListTasks
of a hundred tasks pays for none).
"""
import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from mailbox import selectors as mailbox_selectors
from mailbox.engine import queue_adapter
from mailbox.members import asks, interrupt
from mailbox.engine import history
from mailbox.models import EntryKind

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from delegation import streams
from delegation.credentials import Caller
from delegation.models import FINAL_STATES, DelegatedTask, TaskState
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase

log = logging.getLogger(__name__)
MAX_CONTENT = 65536
MAX_CONTEXT_ID = DelegatedTask._meta.get_field("context_id").max_length
MAX_MESSAGE_ID = DelegatedTask._meta.get_field("message_id").max_length
# How long a blocking SendMessage waits for its task to end before answering with it as it is.
SEND_WAIT_SECONDS = 60.0
# How long CancelTask waits for an interrupted turn to end before answering with the task as it is.
CANCEL_WAIT_SECONDS = 10.0
# A working task whose member waits for a person's answer to an ask made in the task's turn
# (mailbox/members/asks.py). Derived on every read and never stored, so it is no TaskState of the row.
INPUT_REQUIRED = "input_required"


@dataclass
class TaskView:
    """What GetTask answers: the task's state now, and its results once it has them."""

    id: str
    context_id: str
    member: str
    author: str
    prompt_id: str
    message_id: str
    content: str
    state: str
    reason: str = ""
    answer: str = ""
    tool_results: list[dict] = field(default_factory=list)
    updated_at: datetime | None = None
    started_at: datetime | None = None  # when its turn started, if it did
    ask_id: str = ""  # INPUT_REQUIRED: the ask its member waits on

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


# The fields a view takes from its row as they are (its member is the row's member_name; its
# tool results are the row's only once final, its ask is found beside it).
_VIEW_FROM_ROW = (
    "id", "context_id", "author", "prompt_id", "message_id", "content", "state", "reason", "answer",
    "updated_at", "started_at",
)


@dataclass
class TaskRow:
    """A task as its reads need it: its row, with its member's name and phase, its
    prompt's text and start, and its caller's name (``_rows``)."""

    id: str
    context_id: str
    member_id: int
    prompt_id: str
    message_id: str
    with_tool_results: bool
    cancel_requested_at: datetime | None
    state: str
    reason: str
    answer: str
    tool_results: list[dict] | None
    updated_at: datetime
    member_name: str
    member_phase: str
    author: str
    started_at: datetime | None
    content: str = ""


# TaskRow's fields, as the values() of a DelegatedTask query names them.
_ROW_VALUES = {
    "id": "id", "context_id": "context_id", "member_id": "member_id", "prompt_id": "prompt_id",
    "message_id": "message_id", "with_tool_results": "with_tool_results",
    "cancel_requested_at": "cancel_requested_at", "state": "state", "reason": "reason", "answer": "answer",
    "tool_results": "tool_results", "updated_at": "updated_at", "member__name": "member_name",
    "member__phase": "member_phase", "caller__username": "author", "prompt__started_at": "started_at",
}


def _rows(found, *, content: bool = True) -> list[TaskRow]:
    """The tasks of a DelegatedTask queryset as rows, in its order (``content``: with the prompts' text)."""
    names = {**_ROW_VALUES, **({"prompt__content": "content"} if content else {})}
    return [TaskRow(**{names[k]: v for k, v in r.items()}) for r in found.values(*names)]


def task_send(
    *, member: Member, caller: Caller, content: str, context_id: str, message_id: str = "", with_tool_results: bool = False
) -> DelegatedTask:
    """A caller's message to ``member``: a prompt for the Queue adapter (its own turn),
    authored by the caller. A follow-up names the ``context_id`` of an earlier task:
    it must be one of the caller's with the same member. ``with_tool_results``: the
    answer carries the turn's tool results too. The prompt and its task are stored in
    one transaction, or neither is (a refusal stores nothing), and only then offered."""
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "message.parts: the message has no text part.")
    if len(content.encode()) > MAX_CONTENT:
        raise TeamError(ErrorCode.TEAM_MESSAGE_TOO_LARGE, f"The message's text is over {MAX_CONTENT} bytes.")
    if len(context_id) > MAX_CONTEXT_ID:
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"message.contextId: at most {MAX_CONTEXT_ID} characters.")
    if len(message_id) > MAX_MESSAGE_ID:
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"message.messageId: at most {MAX_MESSAGE_ID} characters.")
    with transaction.atomic():
        earlier = DelegatedTask.objects.filter(context_id=context_id).exclude(member=member, caller_id=caller.user_id)
        if earlier.exists():
            raise TeamError(ErrorCode.VALIDATION_ERROR, "That contextId belongs to another member's or caller's tasks.")
        author = get_user_model().objects.get(pk=caller.user_id)
        prompt = queue_adapter.prompt_store(team_id=member.team_id, target_name=member.name, author=author, content=content)
        task = DelegatedTask.objects.create(
            context_id=context_id,
            team_id=member.team_id,
            member=member,
            prompt=prompt,
            caller_id=caller.user_id,
            message_id=message_id,
            with_tool_results=with_tool_results,
        )
    queue_adapter.prompt_offer(prompt)
    return task


def task_of_caller(*, task_id: str, caller: Caller, member: Member | None = None) -> TaskRow:
    """The caller's own task (on ``member``'s endpoint when one is given); others' are not found."""
    found = DelegatedTask.objects.filter(pk=task_id, caller_id=caller.user_id)
    if member is not None:
        found = found.filter(member=member)
    rows = _rows(found)
    if not rows:
        raise TeamError(ErrorCode.NOT_FOUND, f"No task {task_id!r} of yours here.")
    return rows[0]


def task_row(task_id: str) -> TaskRow:
    """A task by its id, for whoever checked already that it may read it."""
    return _rows(DelegatedTask.objects.filter(pk=task_id))[0]


def task_read(task: TaskRow) -> TaskView:
    """The task's state now (module docstring); a final one is kept on the row."""
    return task_views([task])[0]


def task_views(tasks: list[TaskRow]) -> list[TaskView]:
    """Each task's state now, in order (``task_read`` of each); the prompt entries of
    those not final are looked up together."""
    waiting = [t for t in tasks if t.state not in FINAL_STATES]
    starts = history.prompt_turn_starts((t.member_id, t.prompt_id) for t in waiting)
    views = [_view(t, starts.get((t.member_id, t.prompt_id))) for t in tasks]
    working = {t.member_id for t, v in zip(tasks, views) if v.state == TaskState.WORKING}
    if working:
        pending = mailbox_selectors.pending_asks_by_member(working)
        for task, view in zip(tasks, views):
            if view.state != TaskState.WORKING:
                continue
            # The member runs one turn at a time: an ask made since this task's turn started is this task's.
            ask = next((a for a in pending.get(task.member_id, ()) if a.created_at >= view.started_at), None)
            if ask is not None:
                view.state, view.reason, view.ask_id, view.updated_at = INPUT_REQUIRED, ask.question, ask.id, ask.created_at
    return views


def tasks_by_id(task_ids: list[str]) -> list[TaskView]:
    """The views of these tasks (those that exist), without their prompts' text: for
    whoever follows tasks it has already shown (delegation/streams.py)."""
    return task_views(_rows(DelegatedTask.objects.filter(pk__in=task_ids), content=False))


def _view(task: TaskRow, started) -> TaskView:
    view = TaskView(member=task.member_name, **{name: getattr(task, name) for name in _VIEW_FROM_ROW})
    if task.state in FINAL_STATES:
        view.tool_results = _kept_tool_results(task)
        return view
    if started is None:
        if task.member_phase == Phase.FAILED:
            return _settle(task, view, TaskState.FAILED, reason=f"{task.member_name} could not be started.")
        if task.member_phase == Phase.RETIRED:
            return _settle(
                task, view, TaskState.FAILED, reason=f"{task.member_name} was retired before the prompt's turn."
            )
        view.state = TaskState.SUBMITTED
        return view
    view.started_at = view.started_at or started.created_at
    end = None
    if history.turn_bounded_after(started):  # else the turn runs on: nothing after its start can end it
        turn = list(history.turn_after(started, kinds=[EntryKind.ASSISTANT_TEXT, EntryKind.TURN_END]))
        end = next((e for e in turn if e.kind == EntryKind.TURN_END), None)
    if end is None:
        view.state = TaskState.WORKING
        view.updated_at = started.created_at
        return view
    texts = [e.data.get("text") or "" for e in turn if e.kind == EntryKind.ASSISTANT_TEXT and e.id < end.id]
    answer = texts[-1] if texts else ""
    reason = end.data.get("reason")
    results = _tool_results(task, started)
    if reason == "done":
        return _settle(task, view, TaskState.COMPLETED, answer=answer, tool_results=results)
    if reason == "interrupted":
        why = "canceled by its caller" if task.cancel_requested_at else "the turn was interrupted"
        return _settle(task, view, TaskState.CANCELED, reason=why, answer=answer, tool_results=results)
    return _settle(
        task, view, TaskState.FAILED, reason=end.data.get("error") or f"the turn ended: {reason}", answer=answer,
        tool_results=results,
    )


def _settle(
    task: TaskRow, view: TaskView, state: str, *, reason: str = "", answer: str = "",
    tool_results: list[dict] | None = None,
) -> TaskView:
    kept = (tool_results or []) if task.with_tool_results else []
    updated = DelegatedTask.objects.filter(pk=task.id).exclude(state__in=FINAL_STATES).update(
        state=state, reason=reason, answer=answer, tool_results=kept, updated_at=timezone.now()
    )
    if not updated:  # another process settled it first: its word stands
        return task_read(task_row(task.id))
    task.state, task.reason, task.answer, task.tool_results = state, reason, answer, kept
    view.state, view.reason, view.answer, view.updated_at = state, reason, answer, timezone.now()
    view.tool_results = kept
    return view


def _kept_tool_results(task: TaskRow) -> list[dict]:
    """A final task's tool results, as kept on its row (read from the history once, for
    a task settled before they were kept)."""
    if not task.with_tool_results:
        return []
    if task.tool_results is None:
        started = history.prompt_turn_start(member_id=task.member_id, prompt_id=task.prompt_id)
        task.tool_results = _tool_results(task, started) if started is not None else []
        DelegatedTask.objects.filter(pk=task.id).update(tool_results=task.tool_results)
    return task.tool_results


def _tool_results(task: TaskRow, started) -> list[dict]:
    """The tool results of the task's turn, in order, if its caller asked for them."""
    if not task.with_tool_results:
        return []
    rows = history.turn_after(started, kinds=[EntryKind.TOOL_RESULT])[:100]
    keys = ("tool", "call_id", "result", "error")
    return [{k: r.data[k] for k in keys if r.data.get(k) is not None} for r in rows]


def task_answer(*, task: TaskRow, caller: Caller, content: str) -> TaskView:
    """The caller's message on a task that is INPUT_REQUIRED: it answers the ask its member
    waits on (mailbox/members/asks.py, as an operator's answer would: the first answer wins), a
    decision when the text is one of the ask's options, else in words. Refused on a task
    that waits for nothing."""
    view = task_read(task)
    if view.state != INPUT_REQUIRED:
        raise TeamError(
            ErrorCode.VALIDATION_ERROR,
            f"The task is {view.state}, not waiting for input: send a follow-up with the same contextId, "
            "not a taskId.",
        )
    text = content.strip()
    if not text:
        raise TeamError(ErrorCode.VALIDATION_ERROR, "message.parts: the message has no text part.")
    ask = mailbox_selectors.ask_get(team_id=Member.objects.get(pk=task.member_id).team_id, ask_id=view.ask_id)
    by = get_user_model().objects.get(pk=caller.user_id).get_username()
    if text in (ask.options or []):
        asks.ask_answer(team_id=ask.team_id, ask_id=ask.id, decision=text, by=by)
    else:
        asks.ask_answer(team_id=ask.team_id, ask_id=ask.id, answer=content[: asks.MAX_ANSWER_CHARS], by=by)
    return task_read(task_row(task.id))


def task_cancel(*, task: TaskRow) -> TaskView:
    """CancelTask: a waiting prompt is withdrawn (the Queue adapter never offers it);
    one already offered to the session or under way is interrupted, and the task
    is CANCELED when its turn ends so. A final task cannot be canceled."""
    view = task_read(task)
    if view.final:
        raise TeamError(ErrorCode.TASK_INVALID_ACTION, f"The task is {view.state} already.")
    interrupt_channel = ""
    with transaction.atomic():
        now = timezone.now()
        DelegatedTask.objects.filter(pk=task.id).update(cancel_requested_at=now)
        task.cancel_requested_at = now
        if queue_adapter.prompt_withdraw(prompt_id=task.prompt_id):
            view = _settle(task, view, TaskState.CANCELED, reason="withdrawn before its turn started")
        else:
            interrupt_channel = Member.objects.get(pk=task.member_id).session_channel
    if interrupt_channel:
        _interrupt(interrupt_channel)
    return view


def task_interrupt_again(*, task: TaskRow) -> None:
    """A cancel that reached a prompt offered to the session before its turn started
    (the session ignores an interrupt outside a turn): interrupt it again once the
    turn shows up as working. Whoever watches the task calls this."""
    _interrupt(Member.objects.get(pk=task.member_id).session_channel)


def _interrupt(channel: str) -> None:
    try:
        interrupt.turn_interrupt(channel=channel)
    except Exception:  # the layer is away: the turn runs on, and the task reports how it ended
        log.warning("could not interrupt %s for a canceled A2A task", channel, exc_info=True)


def tasks_of_caller(*, caller: Caller, member: Member, context_id: str = "", state: str = "", limit: int = 50):
    """ListTasks: the caller's latest ``limit`` tasks on ``member`` (of ``context_id``), and
    whether there are more; those in ``state`` when one is given."""
    found = DelegatedTask.objects.filter(caller_id=caller.user_id, member=member)
    if context_id:
        found = found.filter(context_id=context_id)
    tasks = _rows(found.order_by("-created_at")[: limit + 1])
    views = task_views(tasks[:limit])
    if state:
        views = [v for v in views if v.state == state]
    return views, len(tasks) > limit


# --- following a task: its streams, the blocking waits and the cancel policy -------------------
# How the transport runs a database call: ``run(fn, **kwargs)`` (it answers the call's errors
# in its own terms: delegation/handler.py's ``_db``).
Run = Callable[..., Awaitable]


def _followed(*, task_ids: list[str]) -> list[TaskView]:
    """The read of a team's watch (delegation/streams.py): ``tasks_by_id`` as it is when read."""
    return tasks_by_id(task_ids=task_ids)


def task_read_of_caller(*, task_id: str, caller: Caller, member: Member) -> TaskView:
    """GetTask, and what a subscription starts from: the caller's own task on ``member``, now."""
    return task_read(task_of_caller(task_id=task_id, caller=caller, member=member))


def _interrupt_again_of_caller(*, task_id: str, caller: Caller, member: Member) -> None:
    task_interrupt_again(task=task_of_caller(task_id=task_id, caller=caller, member=member))


def _cancel_of_caller(*, task_id: str, caller: Caller, member: Member) -> TaskView:
    return task_cancel(task=task_of_caller(task_id=task_id, caller=caller, member=member))


async def task_follow(
    view: TaskView, *, caller: Caller, member: Member, run: Run, interrupt_when_working: bool = False
) -> AsyncIterator[TaskView]:
    """Each state of the task after ``view``, as it changes, until it is final (its team's
    watch in this process wakes it: delegation/streams.py). A task that is gone meanwhile
    is TASK_NOT_FOUND.

    ``interrupt_when_working``: the task was canceled after its prompt was offered to the
    session but before its turn started, when the session ignores an interrupt; its
    turn is interrupted again once it shows up as working."""
    if view.final:
        return
    async with streams.following(view, team_id=member.team_id, read=_followed) as follower:
        while not view.final:
            try:
                view = await follower.changed()
            except streams.Gone:
                raise TeamError(ErrorCode.TASK_NOT_FOUND, f"The task {view.id!r} is gone.") from None
            yield view
            if interrupt_when_working and view.state == TaskState.WORKING:
                interrupt_when_working = False
                await run(_interrupt_again_of_caller, task_id=view.id, caller=caller, member=member)


async def task_settled(
    view: TaskView, *, caller: Caller, member: Member, run: Run, seconds: float, interrupt_when_working: bool = False
) -> TaskView:
    """The task once it is final, or as it is after ``seconds`` (read again either way)."""
    try:
        async with asyncio.timeout(seconds):
            async for _ in task_follow(
                view, caller=caller, member=member, run=run, interrupt_when_working=interrupt_when_working
            ):
                pass
    except TimeoutError:
        pass
    return await run(task_read_of_caller, task_id=view.id, caller=caller, member=member)


async def task_cancel_answered(*, task_id: str, caller: Caller, member: Member, run: Run) -> TaskView:
    """CancelTask (``task_cancel``), answered with how the task ended when that is soon: a turn
    it interrupted, within ``CANCEL_WAIT_SECONDS``; a prompt offered but not started yet is
    interrupted again once its turn shows up (``task_follow``)."""
    view = await run(_cancel_of_caller, task_id=task_id, caller=caller, member=member)
    if view.final:
        return view
    return await task_settled(
        view, caller=caller, member=member, run=run, seconds=CANCEL_WAIT_SECONDS,
        interrupt_when_working=view.state == TaskState.SUBMITTED,
    )
