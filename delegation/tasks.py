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

A final state is written on the task row the first time it is read, so it
stays what it was however the history grows afterwards.
"""
import logging
from dataclasses import dataclass, field
from datetime import datetime
from mailbox import events, history, queue_adapter
from mailbox.models import EntryKind

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from delegation.credentials import Caller
from delegation.models import FINAL_STATES, DelegatedTask, TaskState
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase

log = logging.getLogger(__name__)
MAX_CONTENT = 65536


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

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def task_send(
    *, member: Member, caller: Caller, content: str, context_id: str, message_id: str = "", with_tool_results: bool = False
) -> DelegatedTask:
    """A caller's message to ``member``: a prompt for the Queue adapter (its own turn),
    authored by the caller. A follow-up names the ``context_id`` of an earlier task:
    it must be one of the caller's with the same member. ``with_tool_results``: the
    answer carries the turn's tool results too."""
    if not content.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "The message has no text part.")
    if len(content.encode()) > MAX_CONTENT:
        raise TeamError(ErrorCode.TEAM_MESSAGE_TOO_LARGE, f"The message's text is over {MAX_CONTENT} bytes.")
    earlier = DelegatedTask.objects.filter(context_id=context_id).exclude(member=member, caller_id=caller.user_id)
    if earlier.exists():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "That contextId belongs to another member's or caller's tasks.")
    author = get_user_model().objects.get(pk=caller.user_id)
    prompt = queue_adapter.prompt_submit(team_id=member.team_id, target_name=member.name, author=author, content=content)
    task = DelegatedTask.objects.create(
        context_id=context_id,
        team_id=member.team_id,
        member=member,
        prompt=prompt,
        caller_id=caller.user_id,
        message_id=message_id[:128],
        with_tool_results=with_tool_results,
    )
    events.dashboard_notify(member.team_id, "prompt", member=member.name, prompt_id=prompt.pk, a2a_task=task.pk)
    return task


def task_of_caller(*, task_id: str, caller: Caller, member: Member | None = None) -> DelegatedTask:
    """The caller's own task (on ``member``'s endpoint when one is given); others' are not found."""
    found = DelegatedTask.objects.select_related("member", "prompt", "caller").filter(pk=task_id, caller_id=caller.user_id)
    if member is not None:
        found = found.filter(member=member)
    task = found.first()
    if task is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No task {task_id!r} of yours here.")
    return task


def task_read(task: DelegatedTask) -> TaskView:
    """The task's state now (module docstring); a final one is kept on the row."""
    prompt = task.prompt
    view = TaskView(
        id=task.pk,
        context_id=task.context_id,
        member=task.member.name,
        author=task.caller.get_username(),
        prompt_id=prompt.pk,
        message_id=task.message_id,
        content=prompt.content,
        state=task.state,
        reason=task.reason,
        answer=task.answer,
        updated_at=task.updated_at,
        started_at=prompt.started_at,
    )
    if task.state in FINAL_STATES:
        view.tool_results = _tool_results(task)
        return view
    started = history.prompt_turn_start(member_id=task.member_id, prompt_id=prompt.pk)
    if started is None:
        member = Member.objects.get(pk=task.member_id)
        if member.phase == Phase.FAILED:
            return _settle(task, view, TaskState.FAILED, reason=f"{member.name} could not be started.")
        if member.phase == Phase.RETIRED:
            return _settle(task, view, TaskState.FAILED, reason=f"{member.name} was retired before the prompt's turn.")
        view.state = TaskState.SUBMITTED
        return view
    view.started_at = view.started_at or started.created_at
    turn = list(history.turn_after(started, kinds=[EntryKind.ASSISTANT_TEXT, EntryKind.TURN_END]))
    end = next((e for e in turn if e.kind == EntryKind.TURN_END), None)
    if end is None:
        view.state = TaskState.WORKING
        view.updated_at = started.created_at
        return view
    texts = [e.data.get("text") or "" for e in turn if e.kind == EntryKind.ASSISTANT_TEXT and e.id < end.id]
    answer = texts[-1] if texts else ""
    reason = end.data.get("reason")
    if reason == "done":
        return _settle(task, view, TaskState.COMPLETED, answer=answer)
    if reason == "interrupted":
        why = "canceled by its caller" if task.cancel_requested_at else "the turn was interrupted"
        return _settle(task, view, TaskState.CANCELED, reason=why, answer=answer)
    return _settle(task, view, TaskState.FAILED, reason=end.data.get("error") or f"the turn ended: {reason}", answer=answer)


def _settle(task: DelegatedTask, view: TaskView, state: str, *, reason: str = "", answer: str = "") -> TaskView:
    updated = DelegatedTask.objects.filter(pk=task.pk).exclude(state__in=FINAL_STATES).update(
        state=state, reason=reason, answer=answer, updated_at=timezone.now()
    )
    if not updated:  # another process settled it first: its word stands
        task.refresh_from_db()
        return task_read(task)
    task.state, task.reason, task.answer = state, reason, answer
    view.state, view.reason, view.answer, view.updated_at = state, reason, answer, timezone.now()
    view.tool_results = _tool_results(task)
    return view


def _tool_results(task: DelegatedTask) -> list[dict]:
    """The tool results of the task's turn, in order, if its caller asked for them."""
    if not task.with_tool_results:
        return []
    started = history.prompt_turn_start(member_id=task.member_id, prompt_id=task.prompt_id)
    if started is None:
        return []
    rows = history.turn_after(started, kinds=[EntryKind.TOOL_RESULT])[:100]
    keys = ("tool", "call_id", "result", "error")
    return [{k: r.data[k] for k in keys if r.data.get(k) is not None} for r in rows]


def task_cancel(*, task: DelegatedTask) -> TaskView:
    """CancelTask: a waiting prompt is withdrawn (the Queue adapter never offers it);
    one already offered to the session or under way is interrupted, and the task
    is CANCELED when its turn ends so. A final task cannot be canceled."""
    view = task_read(task)
    if view.final:
        raise TeamError(ErrorCode.TASK_INVALID_ACTION, f"The task is {view.state} already.")
    interrupt_channel = ""
    with transaction.atomic():
        now = timezone.now()
        DelegatedTask.objects.filter(pk=task.pk).update(cancel_requested_at=now)
        task.cancel_requested_at = now
        if queue_adapter.prompt_withdraw(prompt_id=task.prompt_id):
            view = _settle(task, view, TaskState.CANCELED, reason="withdrawn before its turn started")
        else:
            interrupt_channel = Member.objects.get(pk=task.member_id).session_channel
    if interrupt_channel:
        _interrupt(interrupt_channel)
    return view


def task_interrupt_again(*, task: DelegatedTask) -> None:
    """A cancel that reached a prompt offered to the session before its turn started
    (the session ignores an interrupt outside a turn): interrupt it again once the
    turn shows up as working. Whoever watches the task calls this."""
    _interrupt(Member.objects.get(pk=task.member_id).session_channel)


def _interrupt(channel: str) -> None:
    if not channel:
        return
    try:
        events.send_now(channel, {"type": "session.interrupt"}, to_channel=True)
    except Exception:  # the layer is away: the turn runs on, and the task reports how it ended
        log.warning("could not interrupt %s for a canceled A2A task", channel, exc_info=True)


def tasks_of_caller(*, caller: Caller, member: Member, context_id: str = "", state: str = "", limit: int = 50):
    found = DelegatedTask.objects.select_related("member", "prompt", "caller").filter(
        caller_id=caller.user_id, member=member
    )
    if context_id:
        found = found.filter(context_id=context_id)
    tasks = list(found.order_by("-created_at")[: limit + 1])
    views = [task_read(t) for t in tasks[:limit]]
    if state:
        views = [v for v in views if v.state == state]
    return views, len(tasks) > limit
