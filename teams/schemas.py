"""The ten Team tools' arguments and results as pydantic models.

``GET /api/v1/tools`` is generated from these; nothing here is written twice
by hand. Arguments forbid unknown fields, so a payload can never smuggle a
``sender`` or a scheduling choice past validation.
"""
from typing import Annotated, Literal

import re

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_serializer

MemberName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$", max_length=63)]
TaskId = Annotated[str, StringConstraints(pattern=r"^task-[1-9][0-9]{0,9}$")]
StatusLiteral = Literal["provisioning", "running", "idle", "inactive", "failed", "retired"]
ActivityLiteral = Literal[
    "working", "waiting_peer", "waiting_human", "idle", "inactive", "stalled", "failed", "retired"
]
TaskStatusLiteral = Literal["pending", "in_progress", "completed", "deleted"]


def _write_scope_normalised(scope: str) -> str:
    """A write scope is a relative POSIX path inside the workspace (globs allowed). As the
    seed does, a leading './' and a trailing '/' are dropped ('./src/' is 'src'); what is
    left must be clean: not absolute, no '\\', no empty, '.' or '..' segment."""
    if scope.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", scope):
        raise ValueError(f"{scope!r} is absolute; a write scope is a path relative to the workspace, like 'src/api'")
    if "\\" in scope:
        raise ValueError(f"{scope!r} uses '\\'; separate path segments with '/'")
    normalised = scope.removeprefix("./").removesuffix("/")
    if any(s in ("", ".", "..") for s in normalised.split("/")):
        raise ValueError(
            f"{scope!r} is not a clean relative path: no empty, '.' or '..' segments (write 'a/b', not 'a//b', "
            "'.', '../a' or 'a/../b')"
        )
    return normalised


def _no_duplicates(values: list[str]) -> list[str]:
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"{', '.join(map(repr, twice))} is listed more than once")
    return values


def _duplicates_dropped(values: list[str]) -> list[str]:
    """Each scope once, in the order first listed (after normalising: 'src' and './src/' are one)."""
    return list(dict.fromkeys(values))


WriteScope = Annotated[str, StringConstraints(min_length=1, max_length=500), AfterValidator(_write_scope_normalised)]
WriteScopes = Annotated[list[WriteScope], Field(max_length=64), AfterValidator(_duplicates_dropped)]
TaskIds = Annotated[list[TaskId], Field(max_length=256), AfterValidator(_no_duplicates)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Subject = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_not_blank), Field(description="not blank")
]
TaskDescription = Annotated[
    str, StringConstraints(min_length=1, max_length=65536), AfterValidator(_not_blank), Field(description="not blank")
]
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


class ModelUsageOut(BaseModel):
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    replies: int
    cost_usd: float | None = Field(description="US dollars; null when the server's price table does not know the model")


class UsageOut(BaseModel):
    """What model replies used (summed from the ``usage`` the history entries report): input
    tokens (the cached ones among them), output tokens, and what they cost."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    replies: int = 0
    tokens: int = Field(0, description="input + output: what a token budget counts")
    cost_usd: float | None = Field(0.0, description="US dollars; null when a model used has no price on this server")
    models: list[ModelUsageOut] = Field(default_factory=list)


class BudgetOut(BaseModel):
    """The team's token budget: its own (an operator's), the server's default, or none."""

    tokens: int | None = Field(description="null: no budget")
    used: int
    left: int | None
    exhausted: bool = Field(description="no new turn starts in the team until an operator raises it")
    source: Literal["team", "setting", "none"]


class ActivityOut(BaseModel):
    """What the member is doing now and why, derived from what the server records (its
    history entries, its session's status, its host's reports), not from the agent's word."""

    state: ActivityLiteral
    since: str = Field(description="ISO 8601 UTC: when the member entered this state")
    detail: str | None = Field(
        description="working: the tool running, or 'thinking'; waiting_peer: whom (await_message's sender, "
        "wait_agent); waiting_human: the question; stalled: the last entry and its age; failed: the error; "
        "else null"
    )


class MemberOut(BaseModel):
    name: str
    role: Literal["lead", "teammate"]
    status: StatusLiteral
    description: str
    usage: UsageOut = Field(default_factory=UsageOut)
    activity: ActivityOut


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
    warnings: list[str] = Field(
        default_factory=list,
        description="e.g. a write scope that overlaps another open task's; informative, nothing is refused",
    )


# --- spawn_teammate ----------------------------------------------------------
class SpawnTeammateArgs(Args):
    name: MemberName = Field(description="lower-kebab-case, unique in the team, never reused")
    description: Annotated[str, StringConstraints(min_length=1, max_length=2000), AfterValidator(_not_blank)] = Field(
        description="what the teammate is for; not blank"
    )
    prompt: Annotated[str, StringConstraints(max_length=65536)] = Field(
        description="the teammate's first turn, delivered to it as a message from the Lead once its session "
        "starts; blank: no first turn (it waits for messages)"
    )
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
    code: Literal["TEAM_BUDGET_EXHAUSTED"] | None = Field(
        None, description="why the message waits, when it waits for an operator (the team's token budget is used up); "
        "absent otherwise"
    )

    @model_serializer(mode="wrap")
    def _code_only_when_set(self, handler):
        data = handler(self)
        if data.get("code") is None:
            data.pop("code", None)
        return data


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
    usage: UsageOut = Field(default_factory=UsageOut, description="the whole team's")
    budget: BudgetOut | None = None


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
    subject: Subject
    description: TaskDescription
    blocked_by: TaskIds = Field(default_factory=list)
    write_scopes: WriteScopes = Field(default_factory=list)
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
    subject: Subject | None = None
    description: TaskDescription | None = None
    blocked_by: TaskIds | None = None
    write_scopes: WriteScopes | None = None
    owner: MemberName | None = None


# --- ask_human ---------------------------------------------------------------
def _context_size(value: str) -> str:
    if len(value.encode("utf-8")) > 65536:
        raise ValueError("at most 64 KiB of UTF-8")
    return value


AskOption = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_not_blank)]
AskKindLiteral = Literal["question", "approval"]
# What an approval offers when it names no options of its own.
APPROVAL_OPTIONS = ("approve", "deny")


class AskHumanArgs(Args):
    question: Annotated[str, StringConstraints(min_length=1, max_length=4000), AfterValidator(_not_blank)] = Field(
        description="what you ask the person, 1-4000 characters; not blank"
    )
    kind: AskKindLiteral = Field(
        "question", description="'approval': the person decides between options (default ['approve', 'deny'])"
    )
    options: Annotated[list[AskOption], Field(min_length=1, max_length=8), AfterValidator(_no_duplicates)] | None = (
        Field(None, description="1-8 short answers to choose from (each 1-64 characters); the answer's decision is one")
    )
    context: Annotated[str, AfterValidator(_context_size)] = Field(
        "", description="Markdown shown to the person beside the question, at most 64 KiB"
    )
    expires_in_s: Annotated[int, Field(ge=60, le=604800)] | None = Field(
        None, description="seconds until the ask expires unanswered (60-604800); then it is answered with "
        "decision 'expired'. Without it the ask waits until someone answers"
    )

    def options_or_default(self) -> list[str]:
        if self.options:
            return list(self.options)
        return list(APPROVAL_OPTIONS) if self.kind == "approval" else []


class AskHumanResult(Result):
    ask_id: str
    state: Literal["pending"] = "pending"
