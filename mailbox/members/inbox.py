"""A member's inbox for sessions without a websocket: a page of messages by seq
(REST ``GET /api/v1/inbox``, the MCP inbox resource) and history entries
reported in bulk (REST ``POST /api/v1/session/entries``), folded exactly as the
websocket's ``entry`` frames are, so a polling session gets the same delivered
guarantee as a connected one.
"""

from pydantic import TypeAdapter, ValidationError

from mailbox import selectors
from mailbox.engine import hot_path
from mailbox.models import MessageKind, MessageState
from mailbox.plumbing import quota, wire
from mailbox.plumbing.db import to_db_thread
from teams.errors import ErrorCode, TeamError

_entries = TypeAdapter(list[wire.Entry])


def inbox_read(*, member, after_seq: int, limit: int) -> dict:
    """A page of the member's messages; a person's answer to its ask (``human_answer``) also
    names the ask, the decision, the answer and who gave it, as its steer frame does."""
    messages, next_cursor = selectors.inbox_page(member=member, after_seq=after_seq, limit=limit)
    out = [selectors.message_out(m) for m in messages]
    for message in out:
        if message["kind"] == MessageKind.HUMAN_ANSWER:
            message.update(selectors.human_answer_of(message["id"]))
    return {
        "member": member.name,
        "messages": out,
        "next_cursor": next_cursor,
        "last_seq": messages[-1].seq if messages else after_seq,
    }


def entries_parse(raw) -> list[wire.Entry]:
    """A bulk report's entries, as the websocket's ``entry`` frames have them: 1 to
    ``quota.entries_per_request()`` of them (more: the quota's refusal, before any is read)."""
    limit = quota.entries_per_request()
    if not isinstance(raw, list) or not raw:
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"entries is a list of 1-{limit} entries.")
    if len(raw) > limit:
        raise quota.too_many_entries(len(raw))
    try:
        return _entries.validate_python(raw)
    except ValidationError as exc:
        raise TeamError(ErrorCode.VALIDATION_ERROR, wire.validation_summary(exc))


async def entries_ack(*, member, entries: list[wire.Entry]) -> list[dict]:
    """Entries reported in bulk, in order, through the writer: their acknowledgements. The
    first one refused (by the history quota, or by the writer: a message never addressed
    to the member) stops the rest; the refusal carries the acks of those stored before it."""
    admitted, refusal = _quota_admitted(member=member, entries=entries)
    acks: list[dict] = []
    if admitted:
        acks, refused = await hot_path.entries_submit(member=member, entries=admitted)
        refusal = refused or refusal
    if refusal is not None:
        refusal.extra["acks"] = acks  # what was stored before the refusal stays stored
        raise refusal
    return acks


def _quota_admitted(*, member, entries: list[wire.Entry]) -> tuple[list[wire.Entry], TeamError | None]:
    """The entries the member's history quota admits, in order, up to the first it refuses
    (mailbox/plumbing/quota.py; its size is the entry's JSON as stored, as on the websocket)."""
    for index, entry in enumerate(entries):
        try:
            quota.entry_charge(member_id=member.pk, size=len(entry.stored_json()))
        except TeamError as exc:
            exc.extra["entry_id"] = entry.id
            return entries[:index], exc
    return entries, None


async def inbox_take(*, member, after_seq: int, limit: int) -> dict:
    """An MCP session reads its inbox resource: the page it is given is now in its
    context, so each undelivered message on it is recorded in the member's history
    as the session's own ``user_message`` entry (the team-message source, folded by
    its id like any entry) and so marked delivered. The one delivery path where the
    server writes the entry: an MCP client reports no history of its own."""
    page = await to_db_thread(inbox_read)(member=member, after_seq=after_seq, limit=limit)
    taken = [message for message in page["messages"] if message["state"] != MessageState.DELIVERED]
    entries = [
        wire.Entry.model_validate(
            {
                "id": f"mcp-inbox-{message['id']}",
                "kind": "user_message",
                "text": message["content"],
                "source": _source_of(message),
            }
        )
        for message in taken
    ]
    if entries:
        _, refusal = await hot_path.entries_submit(member=member, entries=entries)
        if refusal is not None:
            raise refusal
        # Answered as they are now, as REST answers them: delivered, with their
        # accepted_at and delivered_at, and no last_error (a failure stays in the trace).
        now = await to_db_thread(selectors.inbox_messages)(member=member, ids=[m["id"] for m in taken])
        fresh = {m.id: selectors.message_out(m) for m in now}
        page["messages"] = [fresh.get(m["id"], m) for m in page["messages"]]
    return page


def _source_of(message: dict) -> dict:
    """The source an MCP inbox read records a message with: a person's answer to an ask is
    recorded as the SDK records it (``human-answer``, with the ask and the decision)."""
    source = {"kind": wire.TEAM_MESSAGE_SOURCE, "message_id": message["id"], "sender": message["sender"]}
    if message.get("ask_id"):
        source.update(kind=wire.HUMAN_ANSWER_SOURCE, ask_id=message["ask_id"], decision=message.get("decision"),
                      answered_by=message.get("answered_by"))
    return source
