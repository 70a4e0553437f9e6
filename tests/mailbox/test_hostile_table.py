"""The bad-input table (issue 12, item 7): one generator of hostile values, run through
every field of every REST tool (the fields are read from ``GET /api/v1/tools``, so a
new field is covered without editing this file), the same calls as websocket ``tool``
frames and over MCP, every field of the agent's and the host's websocket frames, and
the polling-session and operator bodies, and every field of every A2A method over
both of /a2a's bindings (JSON-RPC and HTTP+JSON), against the application served on a
real socket in this process (tests/support/inproc.py ``Served``: real HTTP, websockets and
server-sent events, the test database and channel layer).

Asserted for every case: no 5xx, a 4xx is the JSON error shape with a code, no
websocket closed with 1011 (each frame is followed by a probe that must be answered),
no error logged with a traceback; and afterwards the roster and the host's presence
are right. Nothing a case stores is checked here (test_hostile_input.py does that).
"""
import asyncio
import itertools
import json
from urllib.parse import quote

import httpx
import pytest
import websockets
from channels.db import database_sync_to_async
from steerboard_protocol.tools import TEAM_TOOLS

from mailbox.models import HostPresence
from teams.models import Member
from tests.support.inproc import Served, manage_json

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def _unlimited(settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "RATE_LIMIT_PER_SECOND": 1_000_000, "RATE_LIMIT_BURST": 1_000_000,
                           "MAX_QUEUED_PROMPTS_PER_MEMBER": 1_000_000}


@pytest.fixture
def tracebacks(caplog):
    """What the server logged with a traceback (what daphne's log would have shown as one)."""
    caplog.set_level("WARNING")
    return lambda: [r for r in caplog.records if r.exc_info or r.stack_info]


def assert_served_cleanly(server: Served, tracebacks) -> None:
    logged = tracebacks()
    assert not logged, "\n".join(f"{r.name}: {r.getMessage()}" for r in logged[:5])
    assert server.server_errors() == [], server.server_errors()[:20]


def hostile_values() -> list[tuple[str, str]]:
    """(label, raw JSON text) of every hostile value; raw text, so that what json.dumps
    cannot write (NaN, nesting past its recursion limit, lone surrogates) is sent too."""
    values = [
        ("nested arrays 1000", "[" * 1000 + "]" * 1000),
        ("nested objects 300", '{"a": ' * 300 + "1" + "}" * 300),
        ("nested 65", "[" * 65 + "]" * 65),
        ("nested 64", "[" * 63 + "]" * 63),
        ("lone high surrogate", '"\\ud800"'),
        ("lone low surrogate inside", '"ab\\udfffcd"'),
        ("reversed pair", '"\\ude00\\ud83d"'),
        ("NUL", '"\\u0000"'),
        ("NUL inside", '"impl\\u0000x"'),
        ("control characters", '"\\u0001\\u001f\\u007f"'),
        ("2^63", str(2**63)),
        ("-2^63-1", str(-(2**63) - 1)),
        ("2^63-1", str(2**63 - 1)),
        ("400 digits", "1" + "0" * 400),
        ("5000 digits", "9" * 5000),
        ("1e999", "1e999"),
        ("NaN", "NaN"),
        ("-Infinity", "-Infinity"),
        ("-0.0", "-0.0"),
        ("null", "null"),
        ("true", "true"),
        ("zero", "0"),
        ("negative", "-1"),
        ("float", "1.5"),
        ("empty string", '""'),
        ("blank string", '"   "'),
        ("empty list", "[]"),
        ("list of null", "[null]"),
        ("object", '{"a": 1}'),
        ("4-byte emoji", json.dumps("😀🧪𝕏" * 20, ensure_ascii=False)),
        ("4-byte emoji escaped", json.dumps("😀🧪𝕏" * 20)),
        ("RTL override", json.dumps("\u202eשלום مرحبا\u202c", ensure_ascii=False)),
        ("zero-width", json.dumps("\u200b\ufeff\u2060")),
        ("long ascii 70k", json.dumps("x" * 70_000)),
        ("long 2-byte 300k", json.dumps("é" * 150_000, ensure_ascii=False)),
        ("task-like", '"task-99999999999"'),
        ("name-like", '"fuzzed"'),
    ]
    return values


VALUES = hostile_values()
# A valid call of each tool; one field at a time is replaced by each hostile value.
BASE = {
    "spawn_teammate": {"name": "fuzzed", "description": "d", "prompt": "p"},
    "send_message": {"target": "impl", "message": "hi"},
    "list_agents": {},
    "wait_agent": {"timeout_ms": 10_000},
    "interrupt_agent": {"target": "impl"},
    "team_task_create": {"subject": "s", "description": "d"},
    "team_task_list": {},
    "team_task_get": {"task_id": "task-1"},
    "team_task_update": {"task_id": "task-1", "expected_revision": 1, "action": "claim"},
    "ask_human": {"question": "q?", "kind": "approval"},
}


def body_with(base: dict, field: str, raw: str) -> str:
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in base.items() if k != field]
    parts.append(f"{json.dumps(field)}: {raw}")
    return "{" + ", ".join(parts) + "}"


def rest_cases(tools: list[dict]) -> list[tuple[str, str, str]]:
    """(tool, label, raw body): every field of every tool, an unknown field and the whole body."""
    cases = []
    # wait_agent's first: a valid one answers at once only while nobody else is active ("no-active-peer"),
    # and the table's valid spawn_teammate calls leave members provisioning (a valid wait then waited
    # out its whole timeout: 30 s for `arguments: null` over MCP).
    for tool in sorted(tools, key=lambda t: t["name"] != "wait_agent"):
        name = tool["name"]
        fields = list(tool["input_schema"].get("properties", {})) + ["sender", "\u202eunknown"]
        for field, (label, raw) in itertools.product(fields, VALUES):
            if name == "wait_agent" and field == "sender":
                continue  # refused before it could wait; "unknown" covers the extra field
            cases.append((name, f"{field}={label}", body_with(BASE[name], field, raw)))
        for label, raw in VALUES:
            cases.append((name, f"body={label}", raw))
    return cases


def ok_4xx(response: httpx.Response, what) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/json"), (what, response.text[:300])
        assert response.json()["error"]["code"], what


class Socket:
    """A websocket whose every frame is followed by a probe that must be answered:
    a socket that died (1011 or any close) fails the case that killed it."""

    def __init__(self, ws, probe: str):
        self.ws, self.probe, self.n = ws, probe, 0

    async def frame(self, text: str, what, answered: bool = False, call: str | None = None) -> None:
        """``answered``: the frame gets an ``ack`` or an ``error`` of its own (an entry), awaited first.
        ``call``: the frame is a tool call with this id, answered by its ``tool_result`` or, refused
        before it runs, by an ``error``; awaited too (a call runs beside the probe, and can end after it)."""
        self.n += 1
        await self.ws.send(text)
        while answered:
            frame = await self.next(what)
            assert not (frame.get("type") == "error" and frame["error"]["code"] == "SERVER_ERROR"), (what, frame)
            answered = frame.get("type") not in ("ack", "error")
        await self.ws.send(self.probe.replace("PROBE", f"probe-{self.n}"))
        probed, called = False, call is None
        while not (probed and called):
            frame = await self.next(what)
            assert not (frame.get("type") == "error" and frame["error"]["code"] == "SERVER_ERROR"), (what, frame)
            if frame.get("type") == "tool_result" and frame.get("id") == f"probe-{self.n}":
                probed = True
            elif frame.get("type") == "error" or (frame.get("type") == "tool_result" and frame.get("id") == call):
                called = True

    async def next(self, what) -> dict:
        try:
            return json.loads(await asyncio.wait_for(self.ws.recv(), 20))
        except websockets.ConnectionClosed as exc:
            raise AssertionError(f"{what} closed the socket: {exc.rcvd}") from exc


async def mcp_call(http: httpx.AsyncClient, url: str, token: str, body: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    return await http.post(url, content=body.encode(), headers=headers)


# The table in four parts, each a test of its own on a team of its own, so that a run's workers
# share it: (part, the least number of cases it must have run).
PARTS = {"rest and bodies": 2500, "mcp": 2000, "agent and host frames": 800, "tool frames": 2000}


@pytest.mark.parametrize("part", list(PARTS))
async def test_every_field_of_every_tool_frame_and_body_survives_the_hostile_table(_unlimited, tracebacks, part):
    """The table measures the parsers, not the limits (tests/mailbox/test_rate_limits.py and
    test_history_quota.py have those): every case reaches the tool, none is answered 429 instead."""
    async with Served() as server:
        counts = await _tool_frames_and_bodies(server, part)
        assert_served_cleanly(server, tracebacks)
    total = sum(counts.values())
    print(f"hostile table, {part}: {total} cases ({counts}), {len(VALUES)} hostile values")
    assert total > PARTS[part]


async def _tool_frames_and_bodies(server: Served, part: str) -> dict[str, int]:
    team = await manage_json("team_create", "fuzz")
    lead = team["lead"]["token"]
    url = server.url
    counts = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        spawned = await http.post("/api/v1/tools/spawn_teammate", json={"name": "impl", "description": "d",
                                  "prompt": "p"}, headers={"Authorization": f"Bearer {lead}"})
        assert spawned.status_code == 200, spawned.text
        impl = (await manage_json("member_token", "fuzz", "impl"))["token"]
        # impl says hello once and leaves: no longer provisioning, nobody is active, and a valid
        # wait_agent of the table answers at once ("no-active-peer") instead of waiting out its
        # timeout (30 s for `arguments: null`).
        async with websockets.connect(f"{server.ws_url}/ws/agent/",
                                      additional_headers={"Authorization": f"Bearer {impl}"}) as ws:
            await ws.send('{"type": "hello", "status": "idle"}')
            while json.loads(await ws.recv())["type"] != "welcome":
                pass
        async with asyncio.timeout(10):
            while (await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)()):
                await asyncio.sleep(0.05)
        tools = (await http.get("/api/v1/tools")).json()
        assert sorted(t["name"] for t in tools) == sorted(TEAM_TOOLS)
        cases = rest_cases(tools)

        if part == "rest and bodies":
            # REST: every field of every tool.
            for tool, label, body in cases:
                response = await http.post(f"/api/v1/tools/{tool}", content=body.encode(),
                                           headers={"Authorization": f"Bearer {lead}"})
                ok_4xx(response, (tool, label))
            counts["rest tools"] = len(cases)
            counts["entries and prompts"] = await _bodies(http, impl)

        if part == "mcp":
            # MCP: the same calls as tools/call, and hostile values in the JSON-RPC envelope.
            mcp = 0
            for tool, label, body in cases:
                envelope = f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": "{tool}", ' \
                           f'"arguments": {body}}}}}'
                ok_4xx(await mcp_call(http, url + "/mcp", lead, envelope), ("mcp", tool, label))
                mcp += 1
            for (label, raw), field in itertools.product(VALUES, ("id", "method", "params", "name")):
                if field == "name":
                    envelope = f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": {raw}}}}}'
                else:
                    fields = {"jsonrpc": '"2.0"', "id": "1", "method": '"tools/list"', "params": "{}", field: raw}
                    envelope = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
                ok_4xx(await mcp_call(http, url + "/mcp", lead, envelope), ("mcp envelope", field, label))
                mcp += 1
            counts["mcp"] = mcp

    # The cheapest call that must be answered: one lookup of a task no case makes (its answer
    # is an error result). list_agents, the roster with its activity and usage, was two
    # fifths of the table's time.
    probe = '{"type": "tool", "id": "PROBE", "name": "team_task_get", "arguments": {"task_id": "task-0"}}'
    if part == "tool frames":
        # Every tool call as a websocket frame; impl is a teammate: the Lead's calls go over the Lead's socket.
        async with websockets.connect(f"{server.ws_url}/ws/agent/", additional_headers={
                "Authorization": f"Bearer {lead}"}, max_size=None) as lead_ws:
            lead_socket = Socket(lead_ws, probe)
            for n, (tool, label, body) in enumerate(cases):
                await lead_socket.frame(f'{{"type": "tool", "id": "call-{n}", "name": "{tool}", "arguments": {body}}}',
                                        ("ws tool", tool, label), call=f"call-{n}")
        counts["websocket tool frames"] = len(cases)

    if part == "agent and host frames":
        counts["websocket frames"] = await _agent_and_host_frames(server, team, lead, impl, probe)
    return counts


async def _bodies(http: httpx.AsyncClient, impl: str) -> int:
    """Polling sessions' entries and operators' prompts: every field."""
    entry_base = {"id": "e-fuzz", "kind": "assistant_text", "text": "t"}
    polled = 0
    prompt_entry = {"id": "pr", "kind": "prompt", "prompt_id": "p"}
    message_entry = {"id": "um", "kind": "user_message", "source": {"kind": "team-message", "message_id": "m"}}
    entry_fields = [(entry_base, f) for f in ["id", "kind", "text", "source", "prompt_id", "x"]]
    entry_fields += [(prompt_entry, "prompt_id"), (message_entry, "source")]
    for (base, field), (label, raw) in itertools.product(entry_fields, VALUES):
        body = '{"entry": ' + body_with(base, field, raw) + "}"
        response = await http.post("/api/v1/session/entries", content=body.encode(),
                                   headers={"Authorization": f"Bearer {impl}"})
        ok_4xx(response, ("entries", field, label))
        polled += 1
    op = await manage_json("operator_create", "fuzzer", "--password", "pw-fuzzer", "--skip-password-validation")
    for field, (label, raw) in itertools.product(["target", "content"], VALUES):
        body = body_with({"target": "impl", "content": "c"}, field, raw)
        response = await http.post("/api/v1/teams/fuzz/prompts", content=body.encode(), headers={
            "Authorization": f"Token {op['token']}", "Content-Type": "application/json"})
        ok_4xx(response, ("prompts", field, label))
        polled += 1
    return polled


async def _agent_and_host_frames(server: Served, team: dict, lead: str, impl: str, probe: str) -> int:
    """Every field of every frame of the agent's websocket and of the host's; afterwards the
    sockets are gone and so are the session and the host."""
    ws_url, url = server.ws_url, server.url
    entry_base = {"id": "e-fuzz", "kind": "assistant_text", "text": "t"}
    frames = 0
    async with websockets.connect(f"{ws_url}/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"},
                                  max_size=None) as ws:
        agent = Socket(ws, probe)
        await agent.frame('{"type": "hello", "status": "idle"}', "hello")
        for label, raw in VALUES:
            for text in (raw, body_with({"type": "hello"}, "status", raw), body_with({"type": "status"}, "status", raw),
                         body_with({}, "type", raw)):
                await agent.frame(text, ("frame", label))
                frames += 1
            for field in ["id", "kind", "text", "source", "prompt_id", "turn_id", "step"]:
                await agent.frame('{"type": "entry", "entry": ' + body_with(entry_base, field, raw) + "}",
                                  ("entry", field, label), answered=True)
                source = body_with({"kind": "team-message", "message_id": "m"}, "message_id" if field == "id" else
                                   "kind", raw)
                await agent.frame('{"type": "entry", "entry": {"id": "s", "kind": "user_message", "source": '
                                  + source + "}}", ("entry.source", field, label), answered=True)
                frames += 2
            await agent.frame('{"type": "entry", "entry": {"id": "pr", "kind": "prompt", "prompt_id": ' + raw + "}}",
                              ("prompt entry", label), answered=True)
            frames += 1
            for field in ["id", "name", "arguments"]:
                await agent.frame(body_with({"type": "tool", "id": "c", "name": "list_agents", "arguments": {}},
                                            field, raw), ("tool frame", field, label))
                frames += 1
        # The host's websocket: it answers nothing, so its probe is a frame it refuses.
        async with websockets.connect(f"{ws_url}/ws/host/", additional_headers={
                "Authorization": f"Bearer {team['host_token']}"}, max_size=None) as host_ws:
            host = HostSocket(host_ws)
            for label, raw in VALUES:
                for text in (raw, body_with({"type": "start_failed", "error": "x"}, "member", raw),
                             body_with({"type": "start_failed", "member": "impl"}, "error", raw),
                             body_with({"type": "started"}, "member", raw), body_with({}, "type", raw)):
                    await host.frame(text, ("host frame", label))
                    frames += 1
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                roster = (await http.post("/api/v1/tools/list_agents", json={},
                                          headers={"Authorization": f"Bearer {lead}"})).json()
                statuses = {a["name"]: a["status"] for a in roster["agents"]}
                assert statuses["impl"] in ("idle", "running"), statuses  # its socket is open
                sent = (await http.post("/api/v1/tools/send_message", json={"target": "impl", "message": "m"},
                                        headers={"Authorization": f"Bearer {lead}"})).json()
                assert sent.get("delivery", {}).get("host_connected", True) is True, sent

    # Afterwards: the sockets are gone and so are the session and the host.
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        async def impl_status() -> str:
            roster = (await http.post("/api/v1/tools/list_agents", json={},
                                      headers={"Authorization": f"Bearer {lead}"})).json()
            return {a["name"]: a["status"] for a in roster["agents"]}["impl"]

        async with asyncio.timeout(10):
            while (status := await impl_status()) in ("idle", "running"):
                await asyncio.sleep(0.05)
        assert status not in ("idle", "running"), status
        assert await database_sync_to_async(HostPresence.objects.count)() == 0
    return frames


class HostSocket:
    """The host socket answers nothing to a valid frame; a refused frame after each
    case is its probe (an error frame must come back, on an open socket)."""

    PROBE = '{"type": "probe"}'

    def __init__(self, ws):
        self.ws = ws

    async def frame(self, text: str, what) -> None:
        await self.ws.send(text)
        await self.ws.send(self.PROBE)
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(self.ws.recv(), 20))
                assert frame.get("type") in ("error", "start"), (what, frame)
                if frame.get("type") == "error":
                    assert frame["error"]["code"] != "SERVER_ERROR", (what, frame)
                    if "type" in frame["error"]["message"] and "probe" in frame["error"]["message"]:
                        return
        except websockets.ConnectionClosed as exc:
            raise AssertionError(f"{what} closed the host socket: {exc.rcvd}") from exc


# --- /a2a (issue 26, item 3) ---------------------------------------------------------------------
# A valid call of each A2A method; one field at a time is replaced by each hostile value.
A2A_BASE = {
    "SendMessage": {
        "message": {"role": "ROLE_USER", "messageId": "m", "contextId": "ctx", "parts": [{"text": "hi"}],
                    "metadata": {}},
        "configuration": {"returnImmediately": True, "historyLength": 1},
        "metadata": {},
    },
    "SendStreamingMessage": {
        "message": {"role": "ROLE_USER", "messageId": "m", "contextId": "ctx", "parts": [{"text": "hi"}]},
    },
    "GetTask": {"id": "t", "historyLength": 1},
    "ListTasks": {"contextId": "c", "pageSize": 10, "status": "TASK_STATE_WORKING", "historyLength": 1,
                  "includeArtifacts": False, "pageToken": ""},
    "CancelTask": {"id": "t"},
    "SubscribeToTask": {"id": "t"},
}
A2A_STREAMING = ("SendStreamingMessage", "SubscribeToTask")
_RAW = "__hostile__"


def with_raw(base: dict, path: tuple, raw: str) -> str:
    """``base`` as JSON text with the value at ``path`` (keys and list indexes) replaced by raw JSON text."""
    value = json.loads(json.dumps(base))
    here = value
    for step in path[:-1]:
        here = here[step]
    here[path[-1]] = _RAW
    return json.dumps(value).replace(json.dumps(_RAW), raw)


def field_paths(value, prefix=()) -> list[tuple]:
    """Every field of a base call, nested ones too, and an unknown one beside each object's fields."""
    paths = []
    if isinstance(value, dict):
        paths.append((*prefix, "\u202eunknown"))
        for key, child in value.items():
            paths.append((*prefix, key))
            paths += field_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            paths.append((*prefix, index))
            paths += field_paths(child, (*prefix, index))
    return paths


def a2a_rpc_cases() -> list[tuple[str, str, str]]:
    """(method, label, raw JSON-RPC body): every field of every method's params, the envelope, the body."""
    cases = []
    for method, base in A2A_BASE.items():
        envelope = {"jsonrpc": "2.0", "id": 1, "method": method, "params": base}
        for path, (label, raw) in itertools.product(field_paths(base), VALUES):
            cases.append((method, f"params.{'.'.join(map(str, path))}={label}", with_raw(envelope, ("params", *path), raw)))
    for field, (label, raw) in itertools.product(("jsonrpc", "id", "method", "params"), VALUES):
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}
        cases.append(("GetTask", f"{field}={label}", with_raw(envelope, (field,), raw)))
    for label, raw in VALUES:
        cases.append(("GetTask", f"body={label}", raw))
    return cases


def as_text(raw: str) -> str:
    """A hostile value as text for a URL: the string it is, or its JSON text."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    return value if isinstance(value, str) else raw


async def a2a_answer_ok(http: httpx.AsyncClient, url: str, body: str, headers: dict, what, streaming: bool) -> None:
    """Answered below 500; a JSON-RPC error is never an internal error; a stream is read to its first event."""
    if streaming:
        async with http.stream("POST", url, content=body.encode(), headers=headers) as response:
            assert response.status_code < 500, (what, response.status_code)
            if response.headers["content-type"].startswith("text/event-stream"):
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        assert event.get("error", {}).get("code") != -32603, (what, event)
                        return
                return
            await response.aread()
    else:
        response = await http.post(url, content=body.encode(), headers=headers)
    ok_4xx(response, what)
    if response.status_code == 200 and "jsonrpc" in response.json():
        answer = response.json()
        assert "result" in answer or answer["error"]["code"] != -32603, (what, answer)


# The A2A table in its two bindings, each a test of its own, so that a run's workers share it:
# (binding, the least number of cases it must have run).
A2A_PARTS = {"jsonrpc": 1500, "rest": 1200}


@pytest.mark.parametrize("binding", list(A2A_PARTS))
async def test_every_field_of_every_a2a_method_and_binding_survives_the_hostile_table(_unlimited, tracebacks,
                                                                                     monkeypatch, binding):
    """The table measures the parser, not the limits (tests/delegation/test_a2a_gate.py has those).
    A hostile configuration can make a valid SendMessage one that blocks: it waits for a turn
    that never comes here, a twentieth of a second rather than the minute a caller is given
    (the wait's own end is tests/delegation's)."""
    from delegation import tasks

    monkeypatch.setattr(tasks, "SEND_WAIT_SECONDS", 0.05)
    server = await Served().start()
    try:
        team = await manage_json("team_create", "fuzz")
        token = (await manage_json("a2a_credential", "fuzzer", "--team", "fuzz"))["token"]
        url = f"{server.url}/a2a/fuzz/lead/"
        headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0", "Content-Type": "application/json"}
        counts = {}
        # Several at once: a hostile configuration can make a valid SendMessage one that
        # blocks (here for SEND_WAIT_SECONDS). Sixteen keep both cores busy; more only made
        # the client's pool scan more connections for every request (a fifth less time).
        limit = asyncio.Semaphore(16)

        async def each(calls) -> int:
            async def one(call) -> None:
                async with limit:
                    await call

            await asyncio.gather(*(one(c) for c in calls))
            return len(calls)

        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=16)) as http:
            if binding == "jsonrpc":
                # JSON-RPC: every field of every method, the envelope, the whole body.
                counts["jsonrpc"] = await each([
                    a2a_answer_ok(http, url, body, headers, ("jsonrpc", method, label), method in A2A_STREAMING)
                    for method, label, body in a2a_rpc_cases()
                ])
            else:
                counts["rest"] = await _a2a_rest(http, url, headers, each)
            # The team is as it was: its Lead answers a card, its roster is whole.
            assert (await http.get(url + ".well-known/agent-card.json")).status_code == 200
            roster = (await http.post(f"{server.url}/api/v1/tools/list_agents", json={},
                                      headers={"Authorization": f"Bearer {team['lead']['token']}"})).json()
            assert [a["name"] for a in roster["agents"]] == ["lead"]
        assert_served_cleanly(server, tracebacks)
        total = sum(counts.values())
        print(f"hostile table on /a2a, {binding}: {total} cases, {len(VALUES)} hostile values")
        assert total > A2A_PARTS[binding]
    finally:
        await server.stop()


async def _a2a_rest(http: httpx.AsyncClient, url: str, headers: dict, each) -> int:
    """HTTP+JSON: the message bodies, and ids in the path and the query. Answers the number of cases."""
    calls = []
    for name in ("SendMessage", "SendStreamingMessage"):
        base = A2A_BASE[name]
        path = "rest/message:send" if name == "SendMessage" else "rest/message:stream"
        for field, (label, raw) in itertools.product(field_paths(base), VALUES):
            calls.append(a2a_answer_ok(http, url + path, with_raw(base, field, raw), headers,
                                       ("rest", path, field, label), name == "SendStreamingMessage"))
    rest = await each(calls)
    for label, raw in VALUES:
        text = quote(as_text(raw)[:2000].encode("utf-8", "surrogatepass"), safe="")
        for method, path in (("GET", f"rest/tasks/{text}"), ("POST", f"rest/tasks/{text}:cancel"),
                             ("GET", f"rest/tasks?contextId={text}"), ("GET", f"rest/tasks?pageSize={text}"),
                             ("GET", f"rest/tasks?status={text}"), ("GET", f"rest/tasks?historyLength={text}"),
                             ("GET", f"rest/tasks/t?historyLength={text}")):
            ok_4xx(await http.request(method, url + path, headers=headers), ("rest", method, path[:60], label))
            rest += 1
    return rest
