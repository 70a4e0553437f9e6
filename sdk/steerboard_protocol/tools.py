"""The Team tools by name, as the wire contract lists them (docs/protocol.md, "Tools").

The server's registry (mailbox/transports/tools.py) must offer exactly these; it checks at start
(mailbox/apps.py) and refuses to run otherwise. The SDK offers them to its models.
"""
TEAM_TOOLS = (
    "spawn_teammate",
    "send_message",
    "list_agents",
    "wait_agent",
    "interrupt_agent",
    "team_task_create",
    "team_task_list",
    "team_task_get",
    "team_task_update",
    "ask_human",
)

# Calls that carry an idempotency key when a client repeats them (docs/protocol.md, "Idempotency").
KEYED_TOOLS = frozenset({"send_message", "team_task_create"})
