"""The nine Team tools' arguments and results as pydantic models.

``GET /api/v1/tools`` is generated from these; nothing here is written twice
by hand. Arguments forbid unknown fields, so a payload can never smuggle a
``sender`` or a scheduling choice past validation.
"""
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MemberName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$", max_length=63)]
TaskId = Annotated[str, StringConstraints(pattern=r"^task-[1-9][0-9]{0,9}$")]
StatusLiteral = Literal["provisioning", "running", "idle", "inactive", "failed", "retired"]
TaskStatusLiteral = Literal["pending", "in_progress", "completed", "deleted"]
WriteScope = Annotated[str, StringConstraints(min_length=1, max_length=500)]
# 1-128 printable ASCII characters; scoped to the calling member and the tool.
IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x20-\x7e]+$")]
MessageId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
IDEMPOTENCY_KEY_HELP = (
    "Optional, 1-128 printable characters, for this tool and you. Repeating the call with the same key and "
    "identical arguments within the window (7 days by default) replays the stored result with "
    "idempotent_replay: true and performs nothing again; the same key with different arguments fails with "
    "IDEMPOTENCY_KEY_CONFLICT. Without a key, a retry performs the call again."
)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Result(BaseModel):
    pass


class MemberOut(BaseModel):
    name: str
    role: Literal["lead", "teammate"]
    status: StatusLiteral
    description: str


class TaskOut(BaseModel):
    id: str
    revision: int
    subject: str
    description: str
    status: TaskStatusLiteral
    owner: str | None
    blocked_by: list[str]
    write_scopes: list[str]
    ready: bool


# --- spawn_teammate ----------------------------------------------------------
class SpawnTeammateArgs(Args):
    name: MemberName = Field(description="lower-kebab-case, unique in the team, never reused")
    description: Annotated[str, StringConstraints(max_length=2000)]
    prompt: Annotated[str, StringConstraints(max_length=65536)]
    context: Literal["fresh", "fork"] = "fresh"


class SpawnTeammateResult(Result):
    member: MemberOut


# --- send_message ------------------------------------------------------------
class SendMessageArgs(Args):
    target: MemberName = Field(description="the member to message")
    message: str = Field(description="Markdown content")
    reply_to: MessageId | None = Field(
        default=None, description="the id of a message you received; the new message joins its thread"
    )
    idempotency_key: IdempotencyKey | None = Field(default=None, description=IDEMPOTENCY_KEY_HELP)


class DeliveryObservation(BaseModel):
    """What the server saw when it tried to admit the message. On a replay: what it saw the first time."""

    target_status: StatusLiteral
    observed_at: str = Field(description="ISO 8601 UTC")
    host_connected: bool
    expected: str = Field(description="what happens next to this message")
    warnings: list[str]


class SendMessageResult(Result):
    message_id: str
    status: Literal["accepted", "queued"]
    thread_id: str
    delivery: DeliveryObservation
    idempotent_replay: bool = False


# --- list_agents -------------------------------------------------------------
class ListAgentsArgs(Args):
    pass


class ListAgentsResult(Result):
    agents: list[MemberOut]


# --- wait_agent --------------------------------------------------------------
class WaitAgentArgs(Args):
    timeout_ms: Annotated[int, Field(ge=10_000, le=3_600_000)] = 30_000


class NoProgress(BaseModel):
    reason: Literal["no-active-peer"]


class WaitAgentResult(Result):
    timed_out: bool
    no_progress: NoProgress | None


# --- interrupt_agent ---------------------------------------------------------
class InterruptAgentArgs(Args):
    target: MemberName


class InterruptAgentResult(Result):
    previous_status: StatusLiteral


# --- team_task_create --------------------------------------------------------
class TaskCreateArgs(Args):
    subject: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    description: Annotated[str, StringConstraints(max_length=65536)]
    blocked_by: list[TaskId] = Field(default_factory=list, max_length=256)
    write_scopes: list[WriteScope] = Field(default_factory=list, max_length=64)
    idempotency_key: IdempotencyKey | None = Field(default=None, description=IDEMPOTENCY_KEY_HELP)


class TaskResult(Result):
    task: TaskOut


class TaskCreateResult(TaskResult):
    idempotent_replay: bool = False


# --- team_task_list ----------------------------------------------------------
class TaskListArgs(Args):
    status: TaskStatusLiteral | None = None
    owner: str | None = Field(default=None, description="a member name, or 'unowned'")
    ready: bool | None = None
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 50


class TaskListResult(Result):
    tasks: list[TaskOut]
    next_cursor: str | None


# --- team_task_get -----------------------------------------------------------
class TaskGetArgs(Args):
    task_id: TaskId


# --- team_task_update --------------------------------------------------------
TaskAction = Literal["claim", "release", "edit", "set_dependencies", "complete", "reopen", "reassign", "delete"]


class TaskUpdateArgs(Args):
    task_id: TaskId
    expected_revision: Annotated[int, Field(ge=1)]
    action: TaskAction
    subject: Annotated[str, StringConstraints(min_length=1, max_length=500)] | None = None
    description: Annotated[str, StringConstraints(max_length=65536)] | None = None
    blocked_by: list[TaskId] | None = Field(default=None, max_length=256)
    write_scopes: list[WriteScope] | None = Field(default=None, max_length=64)
    owner: MemberName | None = None
