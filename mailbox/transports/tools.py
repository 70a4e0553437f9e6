"""The ten Team tools: one registry, dispatched for REST (and any other transport).

Eight tools are roster and task-board operations of ``teams``; ``send_message``
and ``ask_human`` are the mailbox's. The dispatch sits here because it needs both. Each call runs
one service, which writes its Lead-log record and rings the dashboard's doorbell
(the roster's and the board's through the Lead log teams/services.py is handed).
"""
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from django.conf import settings
from django.db import transaction
from pydantic import BaseModel
from steerboard_protocol.tools import TEAM_TOOLS

from mailbox import selectors as mailbox_selectors
from mailbox.engine import hot_path, idempotency, starts
from mailbox.members import activity, asks, interrupt, usage, waiting
from mailbox.models import MessageKind
from mailbox.plumbing import faults, log_context, metrics, tracing, wire
from mailbox.plumbing.db import to_db_thread
from teams import schemas, selectors, services
from teams.errors import ErrorCode, TeamError
from teams.models import Member


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    result: type[BaseModel]
    run: Callable[[Member, BaseModel], Awaitable[dict]]
    lead_only: bool = False
    # Fields every refusal of a call to this tool carries beside ``error``, whichever
    # transport or step refused it (``refused``): send_message's ``persisted: false``.
    refusal_extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    def schema(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.args.model_json_schema(),
            "output_schema": self.result.model_json_schema(),
        }


def _sync(fn: Callable[[Member, BaseModel], dict]) -> Callable[[Member, BaseModel], Awaitable[dict]]:
    async def run(member: Member, args: BaseModel) -> dict:
        return await to_db_thread(fn)(member, args)

    return run


# --- the tools' bodies ----------------------------------------------------------------------
def _spawn_teammate(lead: Member, args: schemas.SpawnTeammateArgs) -> dict:
    with transaction.atomic():
        member = services.member_spawn(
            lead=lead, name=args.name, description=args.description, prompt=args.prompt, context=args.context
        )
        if args.prompt.strip():
            # Its first turn: durable with the roster entry, delivered once the host has started it.
            hot_path.message_store(
                sender=lead, target_name=member.name, content=args.prompt, kind=MessageKind.SPAWN_PROMPT
            )
    starts.members_start_pending(team_id=lead.team_id)
    doing = activity.members_activity([member])[member.pk]
    return {"member": selectors.member_out(member, activity=doing.out())}


async def _send_message(sender: Member, args: schemas.SendMessageArgs) -> dict:
    """Through the process's writer, keyed or not (mailbox/engine/hot_path.py)."""
    key = args.idempotency_key or None
    return await hot_path.message_send(
        sender=sender, target_name=args.target, content=args.message, reply_to=args.reply_to or "", key=key,
        fingerprint=idempotency.fingerprint(args) if key else "",
    )


def _list_agents(member: Member, args: schemas.ListAgentsArgs) -> dict:
    return usage.roster(team_id=member.team_id)


def _interrupt_agent(lead: Member, args: schemas.InterruptAgentArgs) -> dict:
    return {"previous_status": interrupt.member_interrupt(lead=lead, target_name=args.target)}


def _task_create(member: Member, args: schemas.TaskCreateArgs) -> dict:
    def create() -> dict:
        task = services.task_create(member=member, **args.model_dump(exclude={"idempotency_key"}))
        return {**_task_view(member, task.public_id), "idempotent_replay": False}

    result = idempotency.run_once(member=member, tool="team_task_create", arguments=args, perform=create)
    faults.crash_point("after_task_commit")
    return result


async def _task_create_on_writer(member: Member, args: schemas.TaskCreateArgs) -> dict:
    """On the writer's thread: the key's claim and the task commit together, in order with
    the process's sends (on SQLite the writer is the one database thread anyway)."""
    return await to_db_thread(_task_create, lane="writer")(member, args)


def _task_list(member: Member, args: schemas.TaskListArgs) -> dict:
    tasks, next_cursor = selectors.task_list(team_id=member.team_id, **args.model_dump())
    return {"tasks": selectors.tasks_out(tasks, team_id=member.team_id), "next_cursor": next_cursor}


def _task_view(member: Member, task_id: str) -> dict:
    task = selectors.task_get(team_id=member.team_id, task_id=task_id)
    return {"task": selectors.tasks_out([task], team_id=member.team_id)[0]}


def _task_get(member: Member, args: schemas.TaskGetArgs) -> dict:
    return _task_view(member, args.task_id)


def _task_update(member: Member, args: schemas.TaskUpdateArgs) -> dict:
    task = services.task_update(member=member, **args.model_dump(exclude_unset=True))
    return _task_view(member, task.public_id)


def _ask_human(member: Member, args: schemas.AskHumanArgs) -> dict:
    ask = asks.ask_create(
        member=member, question=args.question, kind=args.kind, options=args.options_or_default(),
        context=args.context, expires_in_s=args.expires_in_s,
    )
    return {"ask_id": ask.id, "state": ask.state}


# --- wait_agent: the one tool that waits --------------------------------------------------------
async def _wait_agent(member: Member, args: schemas.WaitAgentArgs) -> dict:
    """Return when another member's status changes, a message reaches the caller or a task
    changes; never wakes anyone. Event-driven (mailbox/members/waiting.py): one read per doorbell."""
    snapshot = to_db_thread(mailbox_selectors.wait_snapshot)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout_ms / 1000
    recheck = settings.STEERBOARD["WAIT_RECHECK_INTERVAL"]
    async with waiting.doorbells(team_id=member.team_id, member_id=member.pk) as rang:
        active, seen = await snapshot(member)
        if not active:
            return {"timed_out": False, "no_progress": {"reason": "no-active-peer"}}
        while (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rang.wait(), min(recheck, left))
            rang.clear()
            if (await snapshot(member))[1] != seen:
                return {"timed_out": False, "no_progress": None}
    return {"timed_out": True, "no_progress": None}


S = schemas
TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            "spawn_teammate",
            "Lead only. Add a teammate to the roster; a host provisions its session. Names are lower-kebab-case, "
            "unique in the team and never reused.",
            S.SpawnTeammateArgs,
            S.SpawnTeammateResult,
            _sync(_spawn_teammate),
            lead_only=True,
        ),
        Tool(
            "send_message",
            "Send a Markdown message to one team member. Every message steers: a running target gets it at its "
            "next step boundary, an idle one starts a turn, an inactive one is resumed. There is no quiet, "
            "scheduled or deferred delivery. 'accepted' means the target's inbox took it, 'queued' that it is "
            "stored in the durable mailbox and waits for recovery; neither means the target accepted the task or "
            "did the work. Never resend a queued message: it will be delivered, in order. 'delivery' says what "
            "the server saw (target status, what happens next, warnings). To answer a message you received, pass "
            "its id as reply_to: the new message joins its thread. With an idempotency_key a retry of the same "
            "call replays its result (idempotent_replay: true) instead of sending again.",
            S.SendMessageArgs,
            S.SendMessageResult,
            _send_message,
            refusal_extra=MappingProxyType({"persisted": False}),  # a refused send stored nothing: send it again
        ),
        Tool(
            "list_agents",
            "List the Lead and the teammates with their status.",
            S.ListAgentsArgs,
            S.ListAgentsResult,
            _sync(_list_agents),
        ),
        Tool(
            "wait_agent",
            "Wait until another member changes status, a message reaches you or a task on the board changes, or "
            "until the timeout. Returns at once with no_progress when no other member is running or provisioning. "
            "It never wakes anyone.",
            S.WaitAgentArgs,
            S.WaitAgentResult,
            _wait_agent,
        ),
        Tool(
            "interrupt_agent",
            "Lead only. Stop a teammate's current turn; its pending inbox is kept.",
            S.InterruptAgentArgs,
            S.InterruptAgentResult,
            _sync(_interrupt_agent),
            lead_only=True,
        ),
        Tool(
            "team_task_create",
            "Create a task on the team's board, optionally blocked by other tasks. With an idempotency_key a retry "
            "of the same call replays its result (idempotent_replay: true) instead of creating another task.",
            S.TaskCreateArgs,
            S.TaskCreateResult,
            _task_create_on_writer,
        ),
        Tool(
            "team_task_list",
            "List tasks on the board (deleted ones only when status='deleted'), filtered and paginated.",
            S.TaskListArgs,
            S.TaskListResult,
            _sync(_task_list),
        ),
        Tool("team_task_get", "Read one task.", S.TaskGetArgs, S.TaskResult, _sync(_task_get)),
        Tool(
            "team_task_update",
            "Change a task with compare-and-set on expected_revision. Actions: claim, release, edit, "
            "set_dependencies, complete, reopen, reassign (Lead only), delete.",
            S.TaskUpdateArgs,
            S.TaskResult,
            _sync(_task_update),
        ),
        Tool(
            "ask_human",
            "Ask a person (an operator watching the team) a question, or for an approval, and go on at once: "
            "the answer is {ask_id, state: 'pending'}. The person's answer comes back later as a message to you "
            "(kind human_answer, naming the ask_id, the decision and who answered) that steers you like any "
            "message: wait for it with await_message, or keep working and take it when it comes. kind "
            "'approval' offers the options ['approve', 'deny'] unless you name others; a question may offer "
            "1-8 options or be answered in words. context (Markdown, at most 64 KiB) is shown beside the "
            "question. With expires_in_s, an ask nobody answered in time is answered with decision 'expired'.",
            S.AskHumanArgs,
            S.AskHumanResult,
            _sync(_ask_human),
        ),
    ]
}


async def tool_call(
    *, member: Member, name: str, arguments: dict, transport: str = "internal", headers=None,
    trace_out: dict | None = None,
) -> dict:
    """Validate, authorise and run one tool; raise TeamError for every refusal. ``transport``
    (``metrics.TRANSPORTS``): what the call came through, for the metrics; ``headers``: the
    request's, whose W3C ``traceparent`` is the parent of the call's span (mailbox/plumbing/tracing.py);
    ``trace_out``, if given, gets that span's own ``traceparent`` (and ``tracestate``) when
    tracing is on, for the answer's frame."""
    token = metrics.transport.set(transport)
    fields = log_context.of_member(member)
    bound = log_context.bind(**fields)
    label = name if name in TOOLS else "unknown"  # no caller-chosen label values
    try:
        with tracing.tool_span(name=label, team=fields["team"], member=member.name, transport=transport,
                               headers=headers) as span:
            if trace_out is not None:
                trace_out.update(tracing.fields(span))
            result = await _tool_call(member=member, name=name, arguments=arguments)
    except TeamError as exc:
        metrics.tool_called(tool=label, outcome="refused", code=str(exc.code))
        raise refused(name, exc)
    except Exception:
        metrics.tool_called(tool=label, outcome="error")
        raise
    finally:
        metrics.transport.reset(token)
        log_context.reset(bound)
    metrics.tool_called(tool=label, outcome="ok")
    return result


async def _tool_call(*, member: Member, name: str, arguments: dict) -> dict:
    tool = TOOLS.get(name)
    if tool is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No tool named {name!r}; GET /api/v1/tools lists the ten.")
    if tool.lead_only and not member.is_lead:
        raise TeamError(ErrorCode.LEAD_ONLY, f"{name} is for the Lead only.")
    args = validate_arguments(tool, arguments)
    result = await tool.run(member, args)
    return tool.result.model_validate(result).model_dump(mode="json")


def refused(name: str, exc: TeamError) -> TeamError:
    """A refusal of a call to the tool ``name``, with the extras that tool declares for its
    refusals (``Tool.refusal_extra``; a field the refusal already set is kept). The one place
    they are applied: the dispatch below, and every transport and edge step that refuses a
    call before it gets there (mailbox/transports/edge.py, the REST body, MCP's and the websocket's
    argument checks, the websocket's rate and in-flight caps)."""
    tool = TOOLS.get(name)
    if tool is not None:
        for key, value in tool.refusal_extra.items():
            exc.extra.setdefault(key, value)
    return exc


def validate_arguments(tool: Tool, arguments) -> BaseModel:
    from pydantic import ValidationError

    if not isinstance(arguments, dict):
        raise TeamError(ErrorCode.VALIDATION_ERROR, "The arguments are a JSON object.")
    if "sender" in arguments:
        raise TeamError(
            ErrorCode.VALIDATION_ERROR, "The sender is always the member your token names; remove the 'sender' field."
        )
    if tool.name == "send_message":
        _steer_only(arguments)
    try:
        return tool.args.model_validate(arguments)
    except ValidationError as exc:
        raise TeamError(ErrorCode.VALIDATION_ERROR, wire.validation_summary(exc))


_SEND_FIELDS = frozenset(schemas.SendMessageArgs.model_fields)


def _steer_only(arguments: dict) -> None:
    """Refuse any delivery or scheduling choice in a send: quiet delivery does not exist."""
    unknown = sorted(str(k) for k in arguments if k not in _SEND_FIELDS)
    if unknown:
        raise TeamError(
            ErrorCode.VALIDATION_ERROR,
            f"send_message takes only {', '.join(sorted(_SEND_FIELDS))}; remove {', '.join(map(repr, unknown))}. "
            "Team messages always steer: a running target gets the message at its next step boundary, an idle "
            "one starts a turn, an inactive one is resumed. There is no quiet, scheduled or deferred delivery "
            "and no notification policy to choose.",
        )


def registry_check() -> None:
    """At start (mailbox/apps.py): the registry offers exactly the wire contract's tools,
    the names the SDK knows (steerboard_protocol.tools), or the server does not run."""
    if set(TOOLS) != set(TEAM_TOOLS):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"mailbox/transports/tools.py offers {sorted(set(TOOLS) - set(TEAM_TOOLS))} beyond steerboard_protocol.tools and "
            f"lacks {sorted(set(TEAM_TOOLS) - set(TOOLS))}: a tool is added to both (docs/code.md, \"Adding a tool\")"
        )
