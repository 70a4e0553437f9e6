"""The A2A methods on Steerboard's tasks: the ``a2a-sdk`` RequestHandler its
JSON-RPC and HTTP+JSON routes call (delegation/server.py builds those).

The SDK's DefaultRequestHandler runs an AgentExecutor in the process that took
the request and keeps the task's events in that process's memory. Here the
work is done by the member's own session, wherever it is connected, and the
task's state lives in the database (delegation/tasks.py): so this handler
answers every method from the database, and a stream follows the task through
its team's watch in this process (delegation/streams.py: one read per doorbell
for every stream of the team, and a stream is woken only when its task
changed). Any server process can answer any task. How a task is followed, how long a
blocking SendMessage and a CancelTask wait, and when a canceled turn is interrupted again
are delegation/tasks.py's; this module translates between the A2A types and those calls.

What is not the A2A layer's to answer is answered over HTTP in place of the SDK's
response (``HttpAnswer``, sent by delegation/server.py's gate): a database out of
reach (503 ``SERVICE_UNAVAILABLE`` with ``Retry-After``), a member's prompt queue
full (429 ``PROMPT_QUEUE_FULL``).
"""
import functools
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from mailbox.plumbing import outage, tracing
from mailbox.plumbing import quota

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from google.protobuf import json_format, struct_pb2

from delegation import db as a2a_db
from delegation import tasks
from delegation.credentials import Caller
from delegation.models import TaskState
from delegation.tasks import TaskView
from teams.errors import ErrorCode, TeamError
from teams.models import Member

# A caller asks for the turn's tool results with this message metadata key set to true.
TOOL_RESULTS_KEY = "steerboard_tool_results"
# ListTasks answers at most this many tasks (``pageSize``, default 50).
LIST_MAX = 100
LIST_DEFAULT = 50
# A ListTasks counts as one request of the token's rate limit per this many tasks of
# the page it asks for: serialising a task is most of what the call costs.
LIST_TASKS_PER_REQUEST = 10
# Where the call context carries the request's HttpAnswer and the token's rate-limit
# key (delegation/server.py puts them there).
ANSWER_STATE = "steerboard_answer"
RATE_STATE = "steerboard_rate_key"

STATES = {
    TaskState.SUBMITTED: pb.TASK_STATE_SUBMITTED,
    TaskState.WORKING: pb.TASK_STATE_WORKING,
    TaskState.COMPLETED: pb.TASK_STATE_COMPLETED,
    TaskState.FAILED: pb.TASK_STATE_FAILED,
    TaskState.CANCELED: pb.TASK_STATE_CANCELED,
    tasks.INPUT_REQUIRED: pb.TASK_STATE_INPUT_REQUIRED,  # its member waits for a person's answer (ask_human)
}
STATE_NAMES = {v: k for k, v in STATES.items()}


@dataclass
class HttpAnswer:
    """The HTTP answer a method asks for in place of the SDK's (a 503, a 429)."""

    status: int = 0
    body: dict = field(default_factory=dict)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    sent: bool = False


def _a2a_error(exc: TeamError):
    if exc.code in (ErrorCode.NOT_FOUND, ErrorCode.TASK_NOT_FOUND):
        return TaskNotFoundError(message=exc.message)
    if exc.code == ErrorCode.TASK_INVALID_ACTION:
        return TaskNotCancelableError(message=exc.message)
    if exc.code in (ErrorCode.VALIDATION_ERROR, ErrorCode.TEAM_MESSAGE_TOO_LARGE):
        return InvalidParamsError(message=exc.message, data={"code": str(exc.code)})
    return InvalidRequestError(message=exc.message, data={"code": str(exc.code)})


async def _db(context: ServerCallContext, fn, **kwargs):
    """``fn`` on a database thread (A2A's share of them, delegation/db.py). A refusal
    becomes the A2A error for it; what is answered over HTTP (a full prompt queue, a
    database out of reach) is set on the request's ``HttpAnswer`` too."""
    try:
        return await a2a_db.run(fn, **kwargs)
    except TeamError as exc:
        if exc.http_status == 429:
            _answer(context, 429, exc.as_wire())
        raise _a2a_error(exc) from exc
    except Exception as exc:
        what = outage.noted(exc, "an A2A request")
        if what is None:
            raise
        headers = [(k.lower().encode(), v.encode()) for k, v in outage.unavailable_headers().items()]
        _answer(context, 503, outage.unavailable_body(what, persisted=None), headers)
        raise InternalError(message=f"The server cannot reach its {what} just now; try again.") from exc


def _charge(context: ServerCallContext, cost: int) -> None:
    """Charge the rest of a request that costs more than one (ListTasks) to the token's rate."""
    key = context.state.get(RATE_STATE)
    if key is None or cost <= 0:
        return
    try:
        quota.request_charge(key, cost)
    except TeamError as exc:
        retry = (b"retry-after", quota.retry_after_header(exc.extra["retry_after"]).encode())
        _answer(context, exc.http_status, exc.as_wire(), [retry])
        raise InvalidRequestError(message=exc.message, data={"code": str(exc.code)}) from exc


def _history_wanted(params) -> bool:
    if not params.HasField("history_length"):
        return True
    if params.history_length < 0:
        raise InvalidParamsError(
            message=f"historyLength: not negative; {params.history_length} was sent.",
            data={"code": str(ErrorCode.VALIDATION_ERROR)},
        )
    return params.history_length > 0


def _answer(context: ServerCallContext, status: int, body: dict, headers: list | None = None) -> None:
    answer = context.state.get(ANSWER_STATE)
    if answer is not None and not answer.status:
        answer.status, answer.body, answer.headers = status, body, headers or []


def _who(context: ServerCallContext) -> tuple[Member, Caller]:
    return context.state["steerboard_member"], context.state["steerboard_caller"]


def _text(view_id: str, context_id: str, text: str) -> pb.Message:
    return pb.Message(
        message_id=str(uuid.uuid4()), task_id=view_id, context_id=context_id, role=pb.ROLE_AGENT,
        parts=[pb.Part(text=text)],
    )


def _status(view: TaskView) -> pb.TaskStatus:
    status = pb.TaskStatus(state=STATES[view.state])
    if view.updated_at is not None:
        status.timestamp.FromDatetime(view.updated_at)
    if view.reason:
        status.message.CopyFrom(_text(view.id, view.context_id, view.reason))
    return status


def _artifacts(view: TaskView) -> list[pb.Artifact]:
    if view.state != TaskState.COMPLETED:
        return []
    parts = [pb.Part(text=view.answer, media_type="text/plain")]
    for result in view.tool_results:  # only when the caller asked for them (TOOL_RESULTS_KEY)
        value = struct_pb2.Value()
        json_format.ParseDict(result, value)
        parts.append(pb.Part(data=value, media_type="application/json"))
    return [pb.Artifact(artifact_id=f"{view.id}-answer", name="answer",
                        description="The turn's final assistant text", parts=parts)]


def task_proto(view: TaskView, *, history: bool = True, artifacts: bool = True) -> pb.Task:
    task = pb.Task(id=view.id, context_id=view.context_id, status=_status(view))
    if artifacts:
        task.artifacts.extend(_artifacts(view))
    if history:
        task.history.append(
            pb.Message(message_id=view.message_id or view.prompt_id, task_id=view.id, context_id=view.context_id,
                       role=pb.ROLE_USER, parts=[pb.Part(text=view.content)])
        )
    json_format.ParseDict(
        {"steerboard": {"member": view.member, "author": view.author, "prompt_id": view.prompt_id}}, task.metadata
    )
    return task


def _changes(before: TaskView | None, now: TaskView):
    """The stream events that take a client from ``before`` to ``now``."""
    if before is not None and before.state == now.state:
        return
    if before is not None and before.state == TaskState.SUBMITTED and now.final and now.started_at is not None:
        # The whole turn fell between two reads: it did work, so say so first.
        working = pb.TaskStatus(state=pb.TASK_STATE_WORKING)
        working.timestamp.FromDatetime(now.started_at)
        yield pb.TaskStatusUpdateEvent(task_id=now.id, context_id=now.context_id, status=working)
    for artifact in _artifacts(now):
        yield pb.TaskArtifactUpdateEvent(task_id=now.id, context_id=now.context_id, artifact=artifact, last_chunk=True)
    yield pb.TaskStatusUpdateEvent(task_id=now.id, context_id=now.context_id, status=_status(now))


def _run(context: ServerCallContext) -> tasks.Run:
    """How delegation/tasks.py runs this request's database calls: ``_db``, which answers their errors."""
    return functools.partial(_db, context)


async def follow(view: TaskView, context: ServerCallContext):
    """Yield the events of the task's every state change after ``view``, until it is final
    (delegation/tasks.py's ``task_follow``)."""
    member, caller = _who(context)
    try:
        async for now in tasks.task_follow(view, caller=caller, member=member, run=_run(context)):
            for event in _changes(view, now):
                yield event
            view = now
    except TeamError as exc:  # the task is gone
        raise _a2a_error(exc) from None


def _wants_tool_results(params) -> bool:
    for metadata in (params.metadata, params.message.metadata):
        if metadata.fields.get(TOOL_RESULTS_KEY) and metadata.fields[TOOL_RESULTS_KEY].bool_value:
            return True
    return False


class MemberRequestHandler(RequestHandler):
    """The A2A methods of one member's endpoint (the member and caller come with the context)."""

    async def _send(self, params: pb.SendMessageRequest, context: ServerCallContext) -> TaskView:
        """A caller's message: a new task's prompt, or the answer a task waits on. Its span (a
        messaging ``send``) is the child of the request's ``traceparent`` (delegation/server.py)."""
        member, _ = _who(context)
        with tracing.prompt_span(team=member.team.name, target=member.name, transport="a2a") as span:
            view = await self._sent(params, context)
            tracing.prompt_queued(span, prompt_id=None if params.message.task_id else view.prompt_id, task_id=view.id)
        return view

    async def _sent(self, params: pb.SendMessageRequest, context: ServerCallContext) -> TaskView:
        member, caller = _who(context)
        message = params.message
        text = "\n\n".join(part.text for part in message.parts if part.text)
        if message.task_id:  # the answer to the question a task waits on (INPUT_REQUIRED), and nothing else
            def answer(*, task_id: str) -> TaskView:
                return tasks.task_answer(
                    task=tasks.task_of_caller(task_id=task_id, caller=caller, member=member), caller=caller, content=text
                )

            return await _db(context, answer, task_id=message.task_id)

        task = await _db(
            context, tasks.task_send, member=member, caller=caller, content=text,
            context_id=message.context_id or str(uuid.uuid4()), message_id=message.message_id,
            with_tool_results=_wants_tool_results(params),
        )
        return await _db(context, tasks.task_read_of_caller, task_id=task.pk, caller=caller, member=member)

    async def on_message_send(self, params: pb.SendMessageRequest, context: ServerCallContext) -> pb.Task:
        member, caller = _who(context)
        view = await self._send(params, context)
        if not params.configuration.return_immediately:
            view = await tasks.task_settled(
                view, caller=caller, member=member, run=_run(context), seconds=tasks.SEND_WAIT_SECONDS
            )
        return task_proto(view)

    async def on_message_send_stream(self, params: pb.SendMessageRequest, context: ServerCallContext) -> AsyncGenerator:
        member, caller = _who(context)
        view = await self._send(params, context)
        yield task_proto(view)
        async for event in follow(view, context):
            yield event

    async def on_subscribe_to_task(self, params: pb.SubscribeToTaskRequest, context: ServerCallContext) -> AsyncGenerator:
        member, caller = _who(context)
        view = await _db(context, tasks.task_read_of_caller, task_id=params.id, caller=caller, member=member)
        yield task_proto(view)
        async for event in follow(view, context):
            yield event

    async def on_get_task(self, params: pb.GetTaskRequest, context: ServerCallContext) -> pb.Task | None:
        member, caller = _who(context)
        history = _history_wanted(params)
        view = await _db(context, tasks.task_read_of_caller, task_id=params.id, caller=caller, member=member)
        return task_proto(view, history=history)

    async def on_list_tasks(self, params: pb.ListTasksRequest, context: ServerCallContext) -> pb.ListTasksResponse:
        member, caller = _who(context)
        if params.page_size < 0:
            raise InvalidParamsError(
                message=f"pageSize: between 1 and {LIST_MAX} (0 or none: {LIST_DEFAULT}); {params.page_size} was sent.",
                data={"code": str(ErrorCode.VALIDATION_ERROR)},
            )
        size = min(params.page_size or LIST_DEFAULT, LIST_MAX)
        history = _history_wanted(params)
        _charge(context, -(-size // LIST_TASKS_PER_REQUEST) - 1)  # the gate charged one already
        state = STATE_NAMES.get(params.status, "") if params.status else ""
        views, _more = await _db(
            context, tasks.tasks_of_caller,
            caller=caller, member=member, context_id=params.context_id, state=state, limit=size,
        )
        # The SDK drops the artifacts of a ListTasks that did not ask for them: do not build them.
        found = [task_proto(v, history=history, artifacts=params.include_artifacts) for v in views]
        return pb.ListTasksResponse(tasks=found, page_size=size, total_size=len(found))

    async def on_cancel_task(self, params: pb.CancelTaskRequest, context: ServerCallContext) -> pb.Task | None:
        member, caller = _who(context)
        view = await tasks.task_cancel_answered(task_id=params.id, caller=caller, member=member, run=_run(context))
        return task_proto(view)

    async def on_create_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params, context):
        raise ExtendedAgentCardNotConfiguredError()
