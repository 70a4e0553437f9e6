"""A member's inbox for sessions without a websocket: a page of messages by seq
(REST ``GET /api/v1/inbox``, the MCP inbox resource) and history entries
reported in bulk (REST ``POST /api/v1/session/entries``), folded exactly as the
websocket's ``entry`` frames are, so a polling session gets the same delivered
guarantee as a connected one.
"""
from mailbox import selectors, sessions, wire
from mailbox.models import MessageState
from teams.errors import TeamError


def inbox_read(*, member, after_seq: int, limit: int) -> dict:
    messages, next_cursor = selectors.inbox_page(member=member, after_seq=after_seq, limit=limit)
    return {
        "member": member.name,
        "messages": [selectors.message_out(m) for m in messages],
        "next_cursor": next_cursor,
        "last_seq": messages[-1].seq if messages else after_seq,
    }


def entries_ack(*, member, entries: list[wire.Entry]) -> list[dict]:
    acks = []
    for entry in entries:
        try:
            created = sessions.session_entry(member=member, entry=entry.as_stored())
        except TeamError as exc:
            exc.extra["acks"] = acks  # what was stored before the refusal stays stored
            raise
        acks.append({"entry_id": entry.id, "folded": not created})
    return acks


def inbox_take(*, member, after_seq: int, limit: int) -> dict:
    """An MCP session reads its inbox resource: the page it is given is now in its
    context, so each undelivered message on it is recorded in the member's history
    as the session's own ``user_message`` entry (the team-message source, folded by
    its id like any entry) and so marked delivered. The one delivery path where the
    server writes the entry: an MCP client reports no history of its own."""
    page = inbox_read(member=member, after_seq=after_seq, limit=limit)
    for message in page["messages"]:
        if message["state"] == MessageState.DELIVERED:
            continue
        sessions.session_entry(
            member=member,
            entry={
                "id": f"mcp-inbox-{message['id']}",
                "kind": "user_message",
                "text": message["content"],
                "source": {"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
            },
        )
        message["state"] = MessageState.DELIVERED.value
    return page
