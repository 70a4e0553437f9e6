"""Hostile input (issue 12, items 1 and 3-6): a bad frame never crashes an agent or host
websocket and never leaves a ghost session or host; a bad body is a 4xx with the
JSON error shape, never a 500 or Django's HTML page. Runs on the test run's
backend (SQLite, or PostgreSQL + Redis, where a NUL byte used to be a DataError)."""
import asyncio
import json

import httpx
import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from config.asgi import application
from mailbox.members import sessions
from mailbox.models import HistoryEntry, HostPresence, HumanPrompt, TeamMessage
from mailbox.transports import consumers
from mailbox.plumbing import wire
from teams.models import Member, Task
from tests.support.inproc import Agent, manage_json, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# Frames that used to end the socket with 1011 (RecursionError, pydantic's serialisation
# depth, UnicodeEncodeError on PostgreSQL, DataError on PostgreSQL); raw text, as sent.
AGENT_TRIGGERS = [
    ("json nested 1000 deep", '{"type": "status", "status": "idle", "x": ' + nested(1000) + "}", None),
    ("entry nested 500 deep",
     '{"type": "entry", "entry": {"id": "deep", "kind": "assistant_text", "extra": ' + nested(500) + "}}", None),
    ("lone surrogate in entry.prompt_id",
     '{"type": "entry", "entry": {"id": "p1", "kind": "prompt", "prompt_id": "\\ud800"}}', "entry.prompt_id"),
    ("lone surrogate in entry.source.message_id",
     '{"type": "entry", "entry": {"id": "m1", "kind": "user_message", "text": "hi", '
     '"source": {"kind": "team-message", "message_id": "\\udfff"}}}', "entry.source.message_id"),
    ("NUL in entry.id", '{"type": "entry", "entry": {"id": "e\\u0000", "kind": "assistant_text"}}', "entry.id"),
    ("NUL in entry text", '{"type": "entry", "entry": {"id": "t1", "kind": "assistant_text", "text": "a\\u0000b"}}',
     "entry.text"),
    ("source.message_id longer than its column",
     '{"type": "entry", "entry": {"id": "m2", "kind": "user_message", "text": "hi", '
     '"source": {"kind": "team-message", "message_id": "' + "m" * 65 + '"}}}', "entry.source.message_id"),
    ("prompt_id longer than its column",
     '{"type": "entry", "entry": {"id": "p2", "kind": "prompt", "prompt_id": "' + "p" * 65 + '"}}', "entry.prompt_id"),
    ("integer past 64 bits", '{"type": "entry", "entry": {"id": "n1", "kind": "turn_start", "step": '
     + "9" * 30 + "}}", None),
]
HOST_TRIGGERS = [
    ("json nested 1000 deep", nested(1000), None),
    ("lone surrogate in start_failed.member", '{"type": "start_failed", "member": "\\ud800", "error": "x"}',
     "member"),
    ("NUL in start_failed.member", '{"type": "start_failed", "member": "impl\\u0000", "error": "x"}', "member"),
    ("NUL in start_failed.error", '{"type": "start_failed", "member": "impl", "error": "\\u0000"}', "error"),
]


@database_sync_to_async
def status_of(name: str) -> str:
    return Member.objects.get(name=name).status


@database_sync_to_async
def host_rows() -> int:
    return HostPresence.objects.count()


@database_sync_to_async
def history_ids(name: str) -> list[str]:
    return list(HistoryEntry.objects.filter(member__name=name).values_list("entry_id", flat=True))


async def roster(api, lead: str) -> dict[str, str]:
    return {a["name"]: a["status"] for a in (await api.ok(lead, "list_agents"))["agents"]}


async def until(predicate, what: str, timeout: float = 5) -> None:
    for _ in range(int(timeout / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def crashed(agent: Agent) -> bool:
    """The application ended with the injected exception (it did not close the socket itself)."""
    future = agent.comm.future
    if not future.done():
        return False
    assert isinstance(future.exception(), RuntimeError), future.exception()
    return True


async def raw_frame(agent: Agent, text: str) -> None:
    await agent.comm.send_to(text_data=text)


@pytest.mark.parametrize("label,text,field", AGENT_TRIGGERS, ids=[t[0] for t in AGENT_TRIGGERS])
async def test_a_bad_agent_frame_gets_an_error_frame_and_the_session_ends_with_its_socket(api, label, text, field):
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(token)
    await agent.connect(status="idle")

    await raw_frame(agent, text)
    error = await agent.expect("error")
    assert error["error"]["code"] == "VALIDATION_ERROR", error
    if field:
        assert error["error"]["message"].startswith(field + ":"), error
    # The socket is still open and the session still speaks for the member.
    await agent.send({"type": "entry", "entry": {"id": "after", "kind": "assistant_text", "text": "ok"}})
    assert (await agent.expect("ack"))["entry_id"] == "after"
    assert (await roster(api, team["lead"]))["impl"] == "idle"
    assert await history_ids("impl") == ["after"]  # nothing of the refused frame was stored

    await agent.close()
    await until(lambda: _is(status_of("impl"), "inactive"), "the session to end with its socket")
    sent = await api.ok(team["lead"], "send_message", target="impl", message="after the socket ended")
    assert sent["status"] == "queued" and sent["delivery"]["target_status"] == "inactive", sent
    assert sent["delivery"]["host_connected"] is False


async def _is(awaitable, expected) -> bool:
    return await awaitable == expected


@pytest.mark.parametrize("label,text,field", HOST_TRIGGERS, ids=[t[0] for t in HOST_TRIGGERS])
async def test_a_bad_host_frame_gets_an_error_frame_and_presence_ends_with_the_socket(api, label, text, field):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await until(lambda: _is(host_rows(), 1), "the host's presence")

    await raw_frame(host, text)
    error = await host.expect("error")
    assert error["error"]["code"] == "VALIDATION_ERROR", error
    if field:
        assert error["error"]["message"].startswith(field + ":"), error
    sent = await api.ok(team["lead"], "send_message", target="impl", message="a host is here")
    assert sent["delivery"]["host_connected"] is True
    assert await status_of("impl") != "failed"  # the refused start_failed did nothing

    await host.close()
    await until(lambda: _is(host_rows(), 0), "the host's presence to go")
    sent = await api.ok(team["lead"], "send_message", target="impl", message="no host now")
    assert sent["delivery"]["host_connected"] is False


async def test_a_frame_that_fails_inside_gets_a_server_error_frame_and_the_socket_stays(api, monkeypatch):
    """Past the checks, whatever fails while handling a frame (a fault injected on
    purpose) is one log line and an error frame, not a 1011."""
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(token)
    await agent.connect(status="idle")

    def broken(**kwargs):
        raise RecursionError("injected")

    monkeypatch.setattr(sessions, "session_status", broken)
    await agent.send({"type": "status", "status": "running"})
    error = await agent.expect("error")
    assert error["error"]["code"] == "SERVER_ERROR"
    monkeypatch.undo()
    await agent.status("running")
    assert (await roster(api, team["lead"]))["impl"] == "running"
    await agent.close()
    await until(lambda: _is(status_of("impl"), "inactive"), "the session to end")


async def test_a_consumer_that_crashes_anyway_still_ends_its_session(api, monkeypatch):
    """However the socket ends, even by an exception out of a handler (injected), the
    member's session is ended: no ghost 'idle' member that takes mail nobody reads."""
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(token)
    await agent.connect(status="running")

    async def broken(self, event):
        raise RuntimeError("injected: the socket dies in a handler")

    monkeypatch.setattr(consumers.AgentConsumer, "session_interrupt", broken)
    channel = await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)()
    await get_channel_layer().send(channel, {"type": "session.interrupt"})  # through Channels' own dispatch
    await until(lambda: crashed(agent), "the consumer to crash")
    await until(lambda: _is(status_of("impl"), "inactive"), "the crashed session to end")
    assert (await roster(api, team["lead"]))["impl"] == "inactive"


async def test_a_host_whose_consumer_crashes_leaves_no_presence(api, monkeypatch):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await until(lambda: _is(host_rows(), 1), "the host's presence")

    async def broken(self, event):
        raise RuntimeError("injected: the host socket dies in a handler")

    await host.expect("start")  # the host that connects is asked to provision impl
    monkeypatch.setattr(consumers.HostConsumer, "host_start", broken)
    channel = await database_sync_to_async(lambda: HostPresence.objects.values_list("channel", flat=True).get())()
    await get_channel_layer().send(channel, {"type": "host.start", "member": "impl", "token": "t", "reason": "resume"})
    await until(lambda: crashed(host), "the consumer to crash")
    await until(lambda: _is(host_rows(), 0), "the crashed host's presence to go")
    sent = await api.ok(team["lead"], "send_message", target="impl", message="no host now")
    assert sent["delivery"]["host_connected"] is False


async def test_a_refused_tool_call_over_the_websocket_is_answered_by_its_tool_result(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    lead = Agent(team["lead"])
    await lead.connect(status=None)
    await raw_frame(lead, '{"type": "tool", "id": "c1", "name": "send_message", '
                          '"arguments": {"target": "impl", "message": "a\\u0000"}}')
    result = await lead.expect("tool_result")
    assert result["id"] == "c1"
    assert result["error"]["code"] == "VALIDATION_ERROR"
    assert result["error"]["message"].startswith("arguments.message:")
    assert result["persisted"] is False
    await lead.close()


# --- REST ---------------------------------------------------------------------------------
@database_sync_to_async
def stored() -> tuple:
    return (
        sorted(TeamMessage.objects.values_list("id", "content")),
        sorted(Task.objects.values_list("subject", "description")),
        sorted(Member.objects.values_list("name", "description")),
        sorted(HistoryEntry.objects.values_list("entry_id", flat=True)),
        HumanPrompt.objects.count(),
    )


DEEP = '{"target": "impl", "message": ' + nested(100_000) + "}"
# (tool, raw body, status, code, the field the message names or None)
REST_BAD = [
    ("send_message", DEEP, 400, "VALIDATION_ERROR", None),
    ("send_message", '{"target": "impl", "message": "' + "[" * 70 + '"}', 200, None, None),  # brackets in a string
    ("send_message", '{"target": "impl", "message": "\\ud800"}', 400, "VALIDATION_ERROR", "message"),
    ("send_message", '{"target": "impl\\udc00", "message": "hi"}', 400, "VALIDATION_ERROR", "target"),
    ("send_message", '{"target": "impl", "message": "a\\u0000b"}', 400, "VALIDATION_ERROR", "message"),
    ("send_message", '{"target": "impl", "message": "hi", "reply_to": "m\\u0000"}', 400, "VALIDATION_ERROR",
     "reply_to"),
    ("send_message", '{"target": "impl", "message": "hi", "idempotency_key": "\\ud800"}', 400, "VALIDATION_ERROR",
     "idempotency_key"),
    ("send_message", '{"target": "impl", "message": "\\ud83d\\ude00 \\u05e9\\u05dc\\u05d5\\u05dd"}', 200, None, None),
    ("team_task_create", '{"subject": "s\\u0000", "description": ""}', 400, "VALIDATION_ERROR", "subject"),
    ("team_task_create", '{"subject": "s", "description": "\\ud800"}', 400, "VALIDATION_ERROR", "description"),
    ("team_task_create", '{"subject": "s", "description": "", "write_scopes": ["a\\u0000"]}', 400,
     "VALIDATION_ERROR", "write_scopes.0"),
    ("team_task_list", '{"owner": "\\ud800"}', 400, "VALIDATION_ERROR", "owner"),
    ("team_task_list", '{"owner": "impl\\u0000"}', 400, "VALIDATION_ERROR", "owner"),
    ("team_task_list", '{"limit": ' + "9" * 25 + "}", 400, "VALIDATION_ERROR", None),
    ("team_task_list", '{"limit": NaN}', 400, "VALIDATION_ERROR", None),
    ("team_task_update", '{"task_id": "task-1", "expected_revision": 1e999, "action": "claim"}', 400,
     "VALIDATION_ERROR", None),
    ("spawn_teammate", '{"name": "two", "description": "d\\u0000", "prompt": ""}', 400, "VALIDATION_ERROR",
     "description"),
    ("spawn_teammate", '{"name": "two", "description": "", "prompt": "\\udbff"}', 400, "VALIDATION_ERROR", "prompt"),
    ("spawn_teammate", '{"name": "two", "description": "", "prompt": "", "\\u0000": 1}', 400, "VALIDATION_ERROR",
     "\x00"),
    ("interrupt_agent", '{"target": "\\ud800"}', 400, "VALIDATION_ERROR", "target"),
    ("team_task_get", '{"task_id": "task-1\\u0000"}', 400, "VALIDATION_ERROR", "task_id"),
]


async def test_hostile_rest_tool_bodies_are_refused_naming_the_field_and_store_nothing(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    before = await stored()
    for tool, body, status, code, field in REST_BAD:
        response = await api.tool(team["lead"], tool, body=body.encode())
        assert response.status_code == status, (tool, body[:80], response.text[:300])
        if code is None:
            continue
        error = response.json()["error"]
        assert error["code"] == code, (tool, body[:80], error)
        if field:
            assert error["message"].startswith(field + ":"), (tool, error)
        if tool == "send_message":
            assert response.json()["persisted"] is False
    after = await stored()
    assert after[1:] == before[1:]
    assert sorted(c for _, c in after[0]) == ["[" * 70, "😀 שלום"]  # only the two valid sends


async def test_hostile_session_entries_are_refused_naming_the_field(api):
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    http = api.http
    headers = {"Authorization": f"Bearer {token}"}
    cases = [
        ('{"entries": ' + nested(50_000) + "}", None),
        ('{"entry": {"id": "e1", "kind": "assistant_text", "x": ' + nested(500) + "}}", None),
        ('{"entry": {"id": "e\\u0000", "kind": "assistant_text"}}', "entry.id"),
        ('{"entries": [{"id": "ok", "kind": "assistant_text"}, {"id": "e2", "kind": "assistant_text", '
         '"text": "\\u0000"}]}', "entries.1.text"),
        ('{"entry": {"id": "p1", "kind": "prompt", "prompt_id": "\\ud800"}}', "entry.prompt_id"),
        ('{"entry": {"id": "m1", "kind": "user_message", "source": {"kind": "team-message", '
         '"message_id": "\\ud800"}}}', "entry.source.message_id"),
    ]
    for body, field in cases:
        response = await http.post("/api/v1/session/entries", content=body.encode(), headers=headers)
        assert response.status_code == 400, (body[:80], response.text[:300])
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_ERROR"
        if field:
            assert error["message"].startswith(field + ":"), error
    assert await history_ids("impl") == []
    for after in ("9" * 30, "-1"):
        response = await http.get(f"/api/v1/session/history?after={after}", headers=headers)
        assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR"
        response = await http.get(f"/api/v1/inbox?after_seq={after}", headers=headers)
        assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_hostile_operator_bodies_are_refused_with_the_json_error_shape(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    op = await manage_json("operator_create", "op")
    headers = {"Authorization": f"Token {op['token']}", "Content-Type": "application/json"}
    cases = [
        ("/api/v1/teams/alpha/prompts", nested(100_000), None),
        ("/api/v1/teams/alpha/prompts", '{"target": "impl", "content": ' + nested(70) + "}", None),
        ("/api/v1/teams/alpha/prompts", '{"target": "impl", "content": "\\ud800"}', "content"),
        ("/api/v1/teams/alpha/prompts", '{"target": "impl", "content": "a\\u0000"}', "content"),
        ("/api/v1/teams/alpha/prompts", '{"target": "impl\\ud800", "content": "hi"}', "target"),
        ("/api/v1/teams", '{"name": "t\\ud800"}', "name"),
        ("/api/v1/teams", nested(5000), None),
    ]
    for path, body, field in cases:
        response = await api.http.post(path, content=body.encode(), headers=headers)
        assert response.status_code == 400, (path, body[:60], response.text[:300])
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_ERROR", error
        if field:
            assert field in error["message"], error
    assert (await stored())[4] == 0


async def test_bodies_over_the_upload_limit_answer_413_json(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 20_000
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    op = await manage_json("operator_create", "op")
    before = await stored()
    big = "x" * 30_000
    operator_auth = {"Authorization": f"Token {op['token']}"}
    requests = [
        ("/api/v1/session/entries", {"Authorization": f"Bearer {token}"},
         json.dumps({"entry": {"id": "e", "kind": "assistant_text", "text": big}})),
        ("/api/v1/teams/alpha/prompts", {**operator_auth, "Content-Type": "application/json"},
         json.dumps({"target": "impl", "content": big})),
        ("/api/v1/teams/alpha/prompts", {**operator_auth, "Content-Type": "application/x-www-form-urlencoded"},
         "target=impl&content=" + big),
        ("/api/v1/teams/alpha/prompts", {**operator_auth, "Content-Type": "multipart/form-data; boundary=zz"},
         '--zz\r\nContent-Disposition: form-data; name="content"\r\n\r\n' + big + "\r\n--zz--\r\n"),
        ("/api/v1/tools/send_message", {"Authorization": f"Bearer {team['lead']}"},
         json.dumps({"target": "impl", "message": big})),
    ]
    for path, headers, body in requests:
        response = await api.http.post(path, content=body.encode(), headers=headers)
        assert response.status_code == 413, (path, headers, response.text[:300])
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["error"]["code"] == "TEAM_MESSAGE_TOO_LARGE", response.text
    assert await stored() == before


def test_the_parser_scans_depth_before_it_recurses_and_lets_the_common_body_through():
    assert wire.json_loads(b'{"target": "impl", "message": "hi [[[ {{{"}') == {
        "target": "impl", "message": "hi [[[ {{{"}
    assert wire.json_loads(nested(wire.MAX_JSON_DEPTH).encode()) is not None
    for raw in (nested(wire.MAX_JSON_DEPTH + 1), nested(1_000_000), '{"a": "\\"", "b": ' + nested(65) + "}"):
        with pytest.raises(wire.TeamError):
            wire.json_loads(raw.encode())
    with pytest.raises(ValueError):
        wire.json_loads(b'"\xed\xa0\x80"')  # a surrogate as raw UTF-8 bytes: not UTF-8
    assert wire.json_loads('"\\ud83d\\ude00"') == "😀"  # a pair is one code point


# --- /a2a (issue 26, item 3): the same parser, the A2A bindings' own invalid-params errors ------------
A2A_PATH = "/a2a/alpha/impl/"


@database_sync_to_async
def a2a_credential() -> str:
    from delegation.credentials import credential_create

    return credential_create(name="planner", teams=["alpha"])[1]


@database_sync_to_async
def a2a_stored() -> tuple:
    from delegation.models import DelegatedTask

    return (sorted(HumanPrompt.objects.values_list("content", flat=True)),
            sorted(DelegatedTask.objects.values_list("context_id", flat=True)))


def a2a_send(text: str = '"hi"', *, message_id: str = '"m-1"', context_id: str = '"ctx-1"') -> str:
    """A SendMessage body with raw JSON for its text, messageId and contextId."""
    return ('{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {"role": "ROLE_USER", '
            f'"messageId": {message_id}, "contextId": {context_id}, "parts": [{{"text": {text}}}]}}, '
            '"configuration": {"returnImmediately": true}}}')


def a2a_call(method: str, params: str) -> str:
    return f'{{"jsonrpc": "2.0", "id": 7, "method": "{method}", "params": {params}}}'


# (label, raw body, JSON-RPC error code, the field the message starts with or None)
A2A_JSONRPC_BAD = [
    ("NUL in the text", a2a_send('"a\\u0000b"'), -32602, "params.message.parts.0.text"),
    ("lone surrogate in the text", a2a_send('"\\ud800"'), -32602, "params.message.parts.0.text"),
    ("NUL in messageId", a2a_send(message_id='"m\\u0000"'), -32602, "params.message.messageId"),
    ("NUL in contextId", a2a_send(context_id='"c\\u0000"'), -32602, "params.message.contextId"),
    ("contextId over 64", a2a_send(context_id='"' + "c" * 65 + '"'), -32602, "message.contextId"),
    ("messageId over 128", a2a_send(message_id='"' + "m" * 129 + '"'), -32602, "message.messageId"),
    ("NUL in GetTask's id", a2a_call("GetTask", '{"id": "t\\u0000"}'), -32602, "params.id"),
    ("NUL in CancelTask's id", a2a_call("CancelTask", '{"id": "t\\u0000"}'), -32602, "params.id"),
    ("NUL in SubscribeToTask's id", a2a_call("SubscribeToTask", '{"id": "t\\u0000"}'), -32602, "params.id"),
    ("NUL in ListTasks' contextId", a2a_call("ListTasks", '{"contextId": "\\u0000"}'), -32602, "params.contextId"),
    ("negative pageSize", a2a_call("ListTasks", '{"pageSize": -1}'), -32602, "pageSize"),
    ("negative historyLength", a2a_call("GetTask", '{"id": "t", "historyLength": -1}'), -32602, "historyLength"),
    ("pageSize past 64 bits", a2a_call("ListTasks", '{"pageSize": ' + "9" * 30 + "}"), -32602, None),
    ("params nested 100 deep", a2a_call("ListTasks", nested(100)), -32602, None),
    ("a body of 100 000 [", "[" * 100_000, -32602, None),
    ("not JSON", '{"jsonrpc": "2.0", "id": 7, "method": ', -32700, None),
]


async def test_hostile_a2a_jsonrpc_bodies_get_invalid_params_naming_the_field_and_store_nothing(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    token = await a2a_credential()
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0", "Content-Type": "application/json"}
    cases = [(label, body.encode(), code, field) for label, body, code, field in A2A_JSONRPC_BAD]
    cases.append(("invalid UTF-8", a2a_send('"caf\xe9"').encode("latin-1"), -32700, None))
    for label, body, code, field in cases:
        response = await api.http.post(A2A_PATH, content=body, headers=headers)
        assert response.status_code == 200, (label, response.status_code, response.text[:300])
        error = response.json()["error"]
        assert error["code"] == code, (label, error)
        assert "VALIDATION_ERROR" in json.dumps(error), (label, error)
        if field:
            assert error["message"].startswith(field + ":"), (label, error)
        assert "PostgreSQL" not in error["message"] and "varying" not in error["message"], (label, error)
    # Valid text the parser lets through is stored as sent.
    ok = await api.http.post(A2A_PATH, content=a2a_send('"\\ud83d\\ude00 [[[ {{{"').encode(), headers=headers)
    assert ok.json()["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED", ok.text
    assert await a2a_stored() == (["😀 [[[ {{{"], ["ctx-1"])


async def test_hostile_a2a_rest_binding_requests_get_400_naming_the_field_and_store_nothing(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    token = await a2a_credential()
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0", "Content-Type": "application/json"}
    message = '{"message": {"role": "ROLE_USER", "messageId": "m", "contextId": CTX, "parts": [{"text": TEXT}]}}'
    cases = [
        ("POST", "rest/message:send", message.replace("TEXT", '"a\\u0000"').replace("CTX", '"c"'),
         "message.parts.0.text"),
        ("POST", "rest/message:send", message.replace("TEXT", '"hi"').replace("CTX", '"' + "c" * 65 + '"'),
         "message.contextId"),
        ("POST", "rest/message:stream", message.replace("TEXT", '"hi"').replace("CTX", '"c\\u0000"'),
         "message.contextId"),
        ("POST", "rest/message:send", nested(100_000), None),
        ("POST", "rest/message:send", '{"message": ', None),
        ("GET", "rest/tasks/t%00x", None, "path"),
        ("GET", "rest/tasks?contextId=c%00", None, "query"),
        ("GET", "rest/tasks?pageSize=-1", None, "pageSize"),
        ("POST", "rest/tasks/t%00:cancel", None, "path"),
        ("GET", "rest/tasks/t%00:subscribe", None, "path"),
    ]
    for method, path, body, field in cases:
        content = body.encode() if body is not None else None
        response = await api.http.request(method, A2A_PATH + path, content=content, headers=headers)
        assert response.status_code == 400, (path, body and body[:60], response.status_code, response.text[:300])
        error = response.json()["error"]
        assert "VALIDATION_ERROR" in json.dumps(error), (path, error)
        if field:
            assert error["message"].startswith(field + ":"), (path, error)
    response = await api.http.post(A2A_PATH + "rest/message:send", content=b'{"message": "caf\xe9"}', headers=headers)
    assert response.status_code == 400, response.text
    assert await a2a_stored() == ([], [])
