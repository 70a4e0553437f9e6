"""The team policy: what hosts put into every member's instructions.

Served at ``GET /api/v1/tools/policy`` and as the MCP server's instructions, so
an agent joining over REST, the websocket or MCP reads the same rules.
"""

POLICY_VERSION = 1

RULES: list[dict[str, str]] = [
    {
        "id": "task-workflow",
        "text": "Work from the task board: team_task_list to find a ready task, team_task_get to read it, "
        "team_task_update action=claim (with its expected_revision) before you start, do the work, then "
        "team_task_update action=complete. Claim before working; release a task you cannot finish.",
    },
    {
        "id": "send-once",
        "text": "Every accepted send is delivered with Steer: never resend a message the server answered "
        "'queued' or 'accepted'. Queued means stored and waiting for recovery, which delivers it in order. "
        "Neither status means the target took on the work; ask for an answer if you need one. To retry a send "
        "whose answer you did not get, repeat it unchanged with the same idempotency_key.",
    },
    {
        "id": "integrate-steer",
        "text": "A steered message arrives at your next step boundary while you work, or starts a turn when you "
        "are idle. Integrate it without dropping the work in progress: finish or park the current step, "
        "take the message into account, then carry on or re-plan.",
    },
    {
        "id": "reply-in-thread",
        "text": "Answer a message you received with send_message reply_to=<its id>, so the answer joins its thread.",
    },
    {
        "id": "lead-waits",
        "text": "The Lead waits (wait_agent) for the teammates whose results it needs, and gives its final answer "
        "only after their tasks are completed or it has told them to stop.",
    },
]


def policy_markdown() -> str:
    lines = ["# Team policy", ""]
    lines += [f"- {rule['text']}" for rule in RULES]
    return "\n".join(lines) + "\n"


def policy_out() -> dict:
    return {"version": POLICY_VERSION, "policy": policy_markdown(), "rules": RULES}
