"""The keyless scripted model: the Agent Teams profile without an API key or a network.

Deterministic per role (the member's name). Each script looks only at the
conversation, so a cold-resumed session picks up where its history stops, and
coordinates through messages, never through sleeps or polling:

- ``lead`` (its turn starts with a human prompt): spawns ``researcher`` and
  ``implementer``, each with a spawn prompt that is the teammate's first turn
  (the implementer's asks it to deliver task-2 on top of the researcher's
  task-1), and ends its turn. The implementer's report starts its next turn:
  it waits (``wait_agent``) for its teammates to settle, checks the board and
  the roster, and ends with ``TEAM_WORKFLOW_OK`` only when every task on the
  board is completed.
- ``implementer`` (first turn: its spawn prompt): asks the researcher to start
  and waits for the answer (``await_message``) in the same step, so the answer
  steers into the next step of the same turn; creates task-2 blocked by task-1;
  asks to be told when task-1 is done and waits again; then claims task-2,
  completes it and reports to the Lead.
- ``researcher`` (first turn: its spawn prompt, which says to wait for the
  implementer): once asked, creates, claims and (when the implementer has
  blocked task-2 on it) completes task-1, telling the implementer each time.

Every other member answers each turn with a short acknowledgement.

Rounds: a human prompt to the Lead containing ``[next round]`` runs the
workflow again in the same team (``manage.py demo --team NAME`` sends one).
Each script then reads the conversation from the latest input carrying that
marker only; the Lead messages the teammates it spawned in an earlier round
(with the marker) instead of spawning them again, and they work on new tasks.
A conversation without the marker is one round: the first run is unchanged.

``step_delay`` makes each step wait that many seconds before it answers, as a
model that thinks would, and the session hold steered messages that long at a
step boundary before they enter (AgentSession reads ``model.step_delay``), so a
person can watch the team work on the dashboard and see messages wait as
accepted (``manage.py demo --step-delay``); 0, the default, answers at once.
"""
from __future__ import annotations

import asyncio
import dataclasses
import re

from steerboard_agents.model import INPUT_KINDS, ModelReply, StepContext, ToolCall

WORKFLOW_OK = "TEAM_WORKFLOW_OK"
NEXT_ROUND = "[next round]"

# Markers the scripts look for in each other's messages.
READY = "[implementer ready]"
TASK1_CLAIMED = "[task-1 claimed]"
TASK2_BLOCKED = "[task-2 blocked]"
TASK1_DONE = "[task-1 completed]"
TASK2_DONE = "[task-2 completed]"

RESEARCHER_PROMPT = (
    "You are the researcher. Wait until the implementer asks you to start; then create the research task on "
    "the team board, claim it, tell the implementer, and complete it once the implementer has blocked its "
    "task on yours."
)
IMPLEMENTER_PROMPT = (
    "You are the implementer. Please deliver the feature as task-2, built on the researcher's task-1: ask the "
    "researcher to start, create your task blocked by theirs, wait for the researcher, then claim and complete "
    "it, and report to me when task-2 is completed."
)
WAITING = "waiting for the implementer to ask"


def _call(tool: str, arguments: dict, *also: ToolCall) -> ModelReply:
    return ModelReply(tool_calls=[ToolCall(tool, arguments), *also])


def _update(task_id: str, task: dict, action: str) -> ModelReply:
    return _call("team_task_update", {"task_id": task_id, "expected_revision": task["revision"], "action": action})


def _send(target: str, message: str, *also: ToolCall) -> ModelReply:
    return _call("send_message", {"target": target, "message": message}, *also)


def _said(calls: list[dict], tool: str, **match) -> list[dict]:
    return [
        c for c in calls if c["tool"] == tool and all(c["arguments"].get(k) == v for k, v in match.items())
    ]


def _sent(calls: list[dict], target: str, marker: str) -> bool:
    return any(marker in c["arguments"].get("message", "") for c in _said(calls, "send_message", target=target))


def _heard(context: StepContext, sender: str, marker: str) -> dict | None:
    for entry in context.messages_from(sender):
        if marker in (entry.get("text") or ""):
            return entry
    return None


def _exchange(
    context: StepContext, calls: list[dict], peer: str, marker: str, message: str, *, answer: str
) -> ModelReply | None:
    """Tell ``peer`` ``message`` (once: it carries ``marker``), then wait for its message carrying
    ``answer``: the step to take until that answer is in the context, None once it is."""
    waiting = ToolCall("await_message", {"sender": peer})
    if not _sent(calls, peer, marker):
        return _send(peer, message, waiting)
    if _heard(context, peer, answer) is None:
        return ModelReply(tool_calls=[waiting])
    return None


def _refused_update(calls: list[dict], task_id: str) -> bool:
    """The latest call about this task was a refused update: read the task before trying again."""
    about = [c for c in calls if c["arguments"].get("task_id") == task_id]
    return bool(about) and about[-1]["tool"] == "team_task_update" and "error" in about[-1]


def _stuck(calls: list[dict], task_id: str) -> bool:
    return sum(1 for c in calls if c["arguments"].get("task_id") == task_id and "error" in c) >= 3


def _claim_step(calls: list[dict], task_id: str, task: dict, once_ready: bool = False) -> ModelReply | None:
    """The step that comes first with one's own task, if any: give up after three refusals,
    read the task back after a refused update (``once_ready``: also while its blockers are
    open), claim it while it is pending."""
    if _stuck(calls, task_id):
        return ModelReply(text=f"I cannot move {task_id} forward; the Lead should look at the board.")
    if _refused_update(calls, task_id) or (once_ready and task["status"] == "pending" and not task["ready"]):
        return ModelReply(tool_calls=[ToolCall("team_task_get", {"task_id": task_id})])
    if task["status"] == "pending":
        return _update(task_id, task, "claim")
    return None


def _created(calls: list[dict]) -> str | None:
    """The id of the task this member created, once the server has answered."""
    created = [c for c in _said(calls, "team_task_create") if "result" in c]
    return created[0]["result"]["task"]["id"] if created else None


def _last_task(calls: list[dict], task_id: str) -> dict | None:
    """The latest state of a task seen in a tool result."""
    for call in reversed(calls):
        task = (call.get("result") or {}).get("task")
        if task and task.get("id") == task_id:
            return task
    return None


def _ack(context: StepContext) -> ModelReply:
    inputs = [e for e in context.turn_entries() if e.get("kind") in ("user_message", "prompt")]
    last = inputs[-1] if inputs else None
    who = ((last or {}).get("source") or {}).get("sender") or (last or {}).get("author") or "you"
    return ModelReply(text=f"{context.member}: noted the message from {who}.")


def _round(context: StepContext) -> StepContext:
    """The context from the latest input carrying NEXT_ROUND on (the whole one without it)."""
    starts = [
        i for i, e in enumerate(context.entries) if e.get("kind") in INPUT_KINDS and NEXT_ROUND in (e.get("text") or "")
    ]
    if not starts:
        return context
    return dataclasses.replace(context, entries=context.entries[starts[-1] :])


def _spawned(calls: list[dict]) -> set[str]:
    return {c["arguments"].get("name") for c in _said(calls, "spawn_teammate") if "result" in c}


TEAMMATES = (
    ("researcher", "Researches the approach (task-1).", RESEARCHER_PROMPT),
    ("implementer", "Implements the feature (task-2).", IMPLEMENTER_PROMPT),
)


class KeylessModel:
    def __init__(self, member: str = "", *, step_delay: float = 0.0):
        self.member = member
        self.step_delay = step_delay

    async def step(self, context: StepContext) -> ModelReply:
        if self.step_delay:
            await asyncio.sleep(self.step_delay)
        member = context.member or self.member
        current = _round(context)
        if member == "lead":
            return self.lead(current, earlier=_spawned(context.calls()) - _spawned(current.calls()))
        script = {"implementer": self.implementer, "researcher": self.researcher}.get(member)
        return script(current) if script else _ack(current)

    # --- the Lead ----------------------------------------------------------------------------
    def lead(self, context: StepContext, earlier: set[str] = frozenset()) -> ModelReply:
        """``context`` is this round's; ``earlier`` the teammates spawned in an earlier round."""
        calls = context.calls()
        spawned = _spawned(calls)
        for name, description, prompt in TEAMMATES:
            if name in spawned:
                continue
            if name not in earlier:
                return _call("spawn_teammate", {"name": name, "description": description, "prompt": prompt})
            if not _sent(calls, name, NEXT_ROUND):
                return _send(name, f"{NEXT_ROUND} {prompt}")
        report = _heard(context, "implementer", TASK2_DONE)
        if report is None:
            return ModelReply(text="The team is at work; I will check the board when the implementer reports.")
        finished = [e for e in context.entries if e.get("kind") == "assistant_text" and WORKFLOW_OK in e.get("text", "")]
        if finished and finished[-1].get("turn_id") != context.turn_id:
            return _ack(context)
        # Wait for the teammates to settle, then check the board and the roster; repeat while work is open.
        after = [c for c in calls if c["index"] > context.entries.index(report)]
        waits = [c for c in after if c["tool"] == "wait_agent"]
        if not waits:
            return ModelReply(tool_calls=[ToolCall("wait_agent", {"timeout_ms": 60_000})])
        boards = [c for c in after if c["tool"] == "team_task_list" and "result" in c]
        if not boards or boards[-1]["index"] < waits[-1]["index"]:
            return ModelReply(tool_calls=[ToolCall("team_task_list", {})])
        rosters = [c for c in after if c["tool"] == "list_agents" and "result" in c]
        if not rosters or rosters[-1]["index"] < boards[-1]["index"]:
            return ModelReply(tool_calls=[ToolCall("list_agents", {})])
        tasks = boards[-1]["result"]["tasks"]
        open_tasks = [t["id"] for t in tasks if t["status"] != "completed"]
        if len(tasks) >= 2 and not open_tasks:
            done = " and ".join(t["id"] for t in tasks)
            return ModelReply(text=f"{WORKFLOW_OK}: {done} are completed; the researcher and the implementer reported.")
        if ((waits[-1].get("result") or {}).get("no_progress")) or len(waits) >= 20:
            return ModelReply(text=f"Not finished: {', '.join(open_tasks) or 'no tasks'} still open and nobody is working.")
        return ModelReply(tool_calls=[ToolCall("wait_agent", {"timeout_ms": 60_000})])

    # --- the implementer -------------------------------------------------------------------------
    def implementer(self, context: StepContext) -> ModelReply:
        calls = context.calls()
        asking = _exchange(
            context, calls, "researcher", READY,
            f"{READY} I am building the feature on top of your research. Please create "
            "the research task, claim it and tell me its id.",
            answer=TASK1_CLAIMED,
        )
        if asking:
            return asking
        claimed = _heard(context, "researcher", TASK1_CLAIMED)
        research = (re.findall(r"task-\d+", (claimed.get("text") or "").replace(TASK1_CLAIMED, "")) or ["task-1"])[0]
        mine = _created(calls)
        if mine is None:
            return _call(
                "team_task_create",
                {
                    "subject": "Implement the feature",
                    "description": f"Build the feature on the findings of {research}.",
                    "blocked_by": [research],
                },
            )
        task = _last_task(calls, mine)
        # The first of these steps that has something to do.
        return (
            _exchange(
                context, calls, "researcher", TASK2_BLOCKED,
                f"{TASK2_BLOCKED} I created {mine}, blocked by {research}. Tell me when {research} is completed.",
                answer=TASK1_DONE,
            )
            or _claim_step(calls, mine, task, once_ready=True)
            or _finish(
                context, calls, mine, task,
                "lead", TASK2_DONE, f"{TASK2_DONE} {mine} is completed, built on {research}.",
                closing=f"{mine} is completed and the Lead has my report.",
            )
        )

    # --- the researcher -------------------------------------------------------------------------
    def researcher(self, context: StepContext) -> ModelReply:
        calls = context.calls()
        if _heard(context, "implementer", READY) is None:
            # The spawn prompt's turn: nothing to do until the implementer asks.
            return ModelReply(text=f"researcher: {WAITING}.")
        mine = _created(calls)
        if mine is None:
            return _call(
                "team_task_create",
                {"subject": "Research the approach", "description": "Find what the feature should build on."},
            )
        task = _last_task(calls, mine)
        return (
            _claim_step(calls, mine, task)
            or _exchange(
                context, calls, "implementer", TASK1_CLAIMED,
                f"{TASK1_CLAIMED} I created {mine} and claimed it. Block your task on it.",
                answer=TASK2_BLOCKED,
            )
            or _finish(
                context, calls, mine, task,
                "implementer", TASK1_DONE, f"{TASK1_DONE} {mine} is completed: build on it.",
                closing=f"{mine} is completed; the implementer knows.",
            )
        )


def _finish(
    context: StepContext, calls: list[dict], task_id: str, task: dict,
    peer: str, marker: str, message: str, *, closing: str,
) -> ModelReply:
    """The last steps with one's own task: complete it, tell ``peer`` ``message`` (once: it
    carries ``marker``), say ``closing``; a later turn only acknowledges."""
    if task["status"] == "in_progress":
        return _update(task_id, task, "complete")
    if not _sent(calls, peer, marker):
        return _send(peer, message)
    if _said_before(context, closing):
        return _ack(context)
    return ModelReply(text=closing)


def _said_before(context: StepContext, closing: str) -> bool:
    """The script's closing words were said in an earlier turn: later turns just acknowledge."""
    return any(
        e.get("kind") == "assistant_text" and e.get("text") == closing and e.get("turn_id") != context.turn_id
        for e in context.entries
    )
