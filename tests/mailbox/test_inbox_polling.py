"""GET /api/v1/inbox and POST /api/v1/session/entries: a session that polls instead of holding a websocket."""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import HistoryEntry, TeamMessage
from tests.support.inproc import spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


class PollingAgent:
    """Pages the inbox with the cursor and reports each new message as a history entry."""

    def __init__(self, api, token: str):
        self.api, self.token, self.cursor, self.received = api, token, 0, []

    async def poll(self, limit: int = 3) -> None:
        while True:
            page = await self.api.http.get(f"/api/v1/inbox?after_seq={self.cursor}&limit={limit}", headers=bearer(self.token))
            assert page.status_code == 200, page.text
            body = page.json()
            entries = []
            for message in body["messages"]:
                if message["state"] != "delivered":
                    self.received.append(message)
                    entries.append({
                        "id": f"poll-{message['id']}",
                        "kind": "user_message",
                        "text": message["content"],
                        "source": {"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
                    })
            if entries:
                acks = await self.api.http.post("/api/v1/session/entries", json={"entries": entries}, headers=bearer(self.token))
                assert acks.status_code == 200, acks.text
                assert [a["folded"] for a in acks.json()["acks"]] == [False] * len(entries)
            self.cursor = body["last_seq"]
            if body["next_cursor"] is None:
                return
            assert body["next_cursor"] == body["last_seq"]


@database_sync_to_async
def states(target: str) -> list[str]:
    return list(TeamMessage.objects.filter(target__name=target).order_by("seq").values_list("state", flat=True))


async def test_a_polling_agent_gets_every_message_once_in_order_and_each_is_delivered(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    reviewer = await spawn(api, team["lead"], "alpha", "reviewer")
    sent = []
    for i in range(7):
        token = team["lead"] if i % 2 == 0 else reviewer
        sent.append((await api.ok(token, "send_message", target="implementer", message=f"m{i}"))["message_id"])

    agent = PollingAgent(api, impl)
    await agent.poll(limit=3)
    assert [m["id"] for m in agent.received] == sent
    assert [m["seq"] for m in agent.received] == list(range(1, 8))
    assert await states("implementer") == ["delivered"] * 7

    # Nothing new: the next poll brings nothing and keeps the cursor.
    await agent.poll()
    assert len(agent.received) == 7 and agent.cursor == 7

    # Mail that arrives later comes after the cursor, once.
    later = await api.ok(team["lead"], "send_message", target="implementer", message="later")
    await agent.poll()
    assert [m["id"] for m in agent.received] == sent + [later["message_id"]]
    assert await states("implementer") == ["delivered"] * 8
    counts = await database_sync_to_async(lambda: HistoryEntry.objects.filter(member__name="implementer").count())()
    assert counts == 8


async def test_the_inbox_shows_states_and_threads(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    first = await api.ok(team["lead"], "send_message", target="implementer", message="a")
    page = (await api.http.get("/api/v1/inbox", headers=bearer(impl))).json()
    assert page["member"] == "implementer"
    [message] = page["messages"]
    assert message["id"] == first["message_id"]
    assert message["state"] == "queued"
    assert message["sender"] == "lead" and message["thread_id"] == first["message_id"]
    assert page["next_cursor"] is None and page["last_seq"] == 1
    # The Lead's inbox is its own: it sees nothing of the implementer's.
    assert (await api.http.get("/api/v1/inbox", headers=bearer(team["lead"]))).json()["messages"] == []


async def test_a_reported_entry_folds_like_a_websocket_entry(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="a")
    entry = {"id": "e1", "kind": "user_message", "source": {"kind": "team-message", "message_id": sent["message_id"]}}
    first = await api.http.post("/api/v1/session/entries", json={"entry": entry}, headers=bearer(impl))
    assert first.json() == {"acks": [{"entry_id": "e1", "folded": False}]}
    again = await api.http.post("/api/v1/session/entries", json={"entry": entry}, headers=bearer(impl))
    assert again.json() == {"acks": [{"entry_id": "e1", "folded": True}]}
    other_id = {**entry, "id": "e2"}
    folded = await api.http.post("/api/v1/session/entries", json={"entries": [other_id]}, headers=bearer(impl))
    assert folded.json() == {"acks": [{"entry_id": "e2", "folded": True}]}
    history = await api.http.get("/api/v1/session/history", headers=bearer(impl))
    assert [e["id"] for e in history.json()["entries"]] == ["e1"]


async def test_an_entry_for_mail_addressed_to_someone_else_is_refused(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "reviewer")
    theirs = await api.ok(team["lead"], "send_message", target="reviewer", message="a")
    entries = [
        {"id": "ok-1", "kind": "assistant_text", "text": "thinking"},
        {"id": "bad", "kind": "user_message", "source": {"kind": "team-message", "message_id": theirs["message_id"]}},
    ]
    refused = await api.http.post("/api/v1/session/entries", json={"entries": entries}, headers=bearer(impl))
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "NOT_FOUND"
    assert refused.json()["acks"] == [{"entry_id": "ok-1", "folded": False}]
    assert await states("reviewer") == ["queued"]


@pytest.mark.parametrize(
    "method,path,body,status,code",
    [
        ("get", "/api/v1/inbox?limit=0", None, 400, "VALIDATION_ERROR"),
        ("get", "/api/v1/inbox?limit=101", None, 400, "VALIDATION_ERROR"),
        ("get", "/api/v1/inbox?after_seq=x", None, 400, "VALIDATION_ERROR"),
        ("get", "/api/v1/inbox?after_seq=-1", None, 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/inbox", None, 405, "METHOD_NOT_ALLOWED"),
        ("get", "/api/v1/session/entries", None, 405, "METHOD_NOT_ALLOWED"),
        ("post", "/api/v1/session/entries", b"not json", 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b"[]", 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b'{"entries": []}', 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b'{"entries": {}}', 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b'{"entries": [{"id": "x", "kind": "nope"}]}', 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b'{"entry": {"id": "x", "kind": "user_message", "source": {"kind": "team-message"}}}', 400, "VALIDATION_ERROR"),
        ("post", "/api/v1/session/entries", b'{"entry": {"id": "", "kind": "turn_end"}, "extra": 1}', 400, "VALIDATION_ERROR"),
    ],
)
async def test_bad_input_is_a_4xx_with_a_code(api, method, path, body, status, code):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    response = await api.http.request(method.upper(), path, content=body, headers=bearer(impl))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("path,method", [("/api/v1/inbox", "GET"), ("/api/v1/session/entries", "POST")])
async def test_without_a_member_token_it_is_unauthenticated(api, path, method):
    await team_new()
    response = await api.http.request(method, path, headers=bearer("sbm_wrong"))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/api/v1/tools/send_message", b'{"target": "lead", "message": "hi"}'),
        ("POST", "/api/v1/tools/list_agents", b"{}"),
        ("GET", "/api/v1/inbox", None),
        ("POST", "/api/v1/session/entries", b'{"entries": []}'),
        ("GET", "/api/v1/session/history", None),
        ("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}'),
    ],
)
@pytest.mark.parametrize("token", [None, "sbm_wrong"])
async def test_every_surface_answers_a_missing_member_token_with_one_wording(api, method, path, body, token):
    """REST, the agents' API and /mcp: the same 401 words, with or without a (bad) token (issue 33 item 8)."""
    from mailbox.plumbing.auth import MEMBER_TOKEN_MISSING

    await team_new()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers |= bearer(token)
    response = await api.http.request(method, path, content=body, headers=headers)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == {"code": "UNAUTHENTICATED", "message": MEMBER_TOKEN_MISSING}
    assert MEMBER_TOKEN_MISSING == "Send 'Authorization: Bearer <member token>' (manage.py member_token TEAM MEMBER)."
