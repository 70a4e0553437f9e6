"""One message's trace, collector-less, from the sender's tool call to the target's turn and
history entry (issue 29 item 2; docs/operations.md, "Traces"), on real daphne processes.

The servers trace as an operator would ask them to (``OTEL_TRACES_EXPORTER=console``: each
span as JSON on the process's standard output, which is its log here); the target's session
is the SDK's ``AgentSession`` in this process, tracing into an in-memory exporter. The sender
calls one daphne and the target's session is connected to another (PostgreSQL + Redis, in
the PostgreSQL run), so the trace crosses processes twice; the test reads the spans of all
three and follows the parents. (One server's side of it, in-process on either backend:
tests/agents/test_tracing.py.) The SDK's command line without the opentelemetry packages
runs on one daphne, on either backend.
"""
import asyncio
import json

import httpx
import pytest

from steerboard_agents import AgentSession
from tests.agents.test_session_folding import until
from tests.support.spans import RosterThenAnswer, sdk_in_memory_spans
from tests.support.live import DaphneProcess, LiveEnvironment, postgres_run_only, start_together

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


def servers_tracing(environment: LiveEnvironment, service: str) -> DaphneProcess:
    """A daphne that traces to its log (not started yet)."""
    return DaphneProcess(
        environment, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME=service, OTEL_BSP_SCHEDULE_DELAY="50",
    )


def console_spans(log: str) -> list[dict]:
    """The spans the console exporter printed into a daphne's log (one JSON object each,
    starting on a line of its own), among daphne's own lines."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := log.find("\n{\n", at)) >= 0:
        try:
            span, end = decoder.raw_decode(log, at + 1)
        except json.JSONDecodeError:  # still being written (or another line cut in): not a span yet
            at += 1
            continue
        if isinstance(span, dict) and "context" in span:
            spans.append(span)
        at = end
    return spans


def exported(server, *names: str) -> bool:
    """Whether the server's log holds a whole span of each name (the exporter writes in batches)."""
    have = {s["name"] for s in console_spans(server.log())}
    return all(name in have for name in names)


def one(spans: list[dict], name: str) -> dict:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, (name, [s["name"] for s in spans])
    return found[0]


def ids(span: dict) -> tuple[str, str, str | None]:
    """trace id, span id, parent span id (W3C hex) of a console span."""
    context = span["context"]
    return context["trace_id"].removeprefix("0x"), context["span_id"].removeprefix("0x"), (
        span["parent_id"].removeprefix("0x") if span.get("parent_id") else None)


@pytest.fixture
def sdk_spans():
    with sdk_in_memory_spans() as exporter:
        yield exporter


@postgres_run_only("several processes on PostgreSQL + Redis")
async def test_one_messages_trace_goes_from_the_senders_call_through_the_targets_turn_to_its_history(
    tmp_path, sdk_spans
):
    environment = LiveEnvironment(tmp_path, scale_out=True)
    assert environment.scale_out, "PostgreSQL + Redis are required for two processes"
    sender_side, target_side = start_together(servers_tracing(environment, "steerboard-a"),
                                              servers_tracing(environment, "steerboard-b"))
    session = running = None
    try:
        team = environment.team_create("traced")
        lead = team["lead"]["token"]
        async with httpx.AsyncClient(timeout=30) as http:
            spawned = await http.post(f"{sender_side.url}/api/v1/tools/spawn_teammate",
                                      json={"name": "impl", "description": "d", "prompt": ""},
                                      headers={"Authorization": f"Bearer {lead}"})
            assert spawned.status_code == 200, spawned.text
            token = (await asyncio.to_thread(environment.manage_json, "member_token", "traced", "impl"))["token"]
            session = AgentSession(target_side.url, token, RosterThenAnswer(), max_backoff=0.3)
            running = asyncio.create_task(session.run())
            await asyncio.wait_for(session.connected.wait(), 30)

            sent = await http.post(
                f"{sender_side.url}/api/v1/tools/send_message", json={"target": "impl", "message": "please look"},
                headers={"Authorization": f"Bearer {lead}", "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
            )
            assert sent.status_code == 200, sent.text
            message_id = sent.json()["message_id"]
            await until(lambda: any(s.name == "invoke_agent impl" for s in sdk_spans.get_finished_spans()),
                        "the target's turn", timeout=60)
            history = await http.get(f"{target_side.url}/api/v1/session/history", headers={"Authorization": f"Bearer {token}"})
            entry = [e for e in history.json()["entries"] if (e.get("source") or {}).get("message_id") == message_id]
            assert len(entry) == 1 and entry[0]["kind"] == "user_message"  # the target's history holds it

        await until(lambda: exported(target_side, "deliver impl") and any(
                        s["name"] == "execute_tool list_agents" and ids(s)[0] == TRACE_ID
                        for s in console_spans(target_side.log())),
                    "the deliver span and the server's span of the session's call in the target's log")
        await until(lambda: exported(sender_side, "execute_tool send_message", "send impl", "writer batch"),
                    "the call's, the send's and the batch's spans in the sender's log")
        sender_spans, target_spans = console_spans(sender_side.log()), console_spans(target_side.log())

        # The sender's process: the caller's trace goes on into its call and the send.
        tool = one(sender_spans, "execute_tool send_message")
        assert ids(tool)[0] == TRACE_ID and ids(tool)[2] == CALLER_SPAN
        send = one(sender_spans, "send impl")
        assert ids(send)[0] == TRACE_ID and ids(send)[2] == ids(tool)[1]
        assert send["attributes"]["messaging.message.id"] == message_id
        assert [e["name"] for e in send["events"]] == ["queued", "accepted"]
        batches = [s for s in sender_spans if s["name"] == "writer batch"
                   and any(link["context"]["span_id"] == send["context"]["span_id"] for link in s["links"])]
        assert len(batches) == 1  # the batch that stored it, linked to its send

        # The target's process: the delivery, from the send to the history entry.
        deliver = one(target_spans, "deliver impl")
        assert ids(deliver)[0] == TRACE_ID and ids(deliver)[2] == ids(send)[1]
        assert [e["name"] for e in deliver["events"]] == ["queued", "accepted", "pushed", "delivered"]
        assert deliver["attributes"]["messaging.message.id"] == message_id
        assert deliver["resource"]["attributes"]["service.name"] == "steerboard-b"

        # The target's session: its turn continues the send's trace (the steer frame carried it),
        # and its tool call carries the trace to the server, whose span of the call is its child.
        finished = {s.name: s for s in sdk_spans.get_finished_spans()}
        turn, call = finished["invoke_agent impl"], finished["execute_tool list_agents"]
        assert f"{turn.context.trace_id:032x}" == TRACE_ID and f"{turn.parent.span_id:016x}" == ids(send)[1]
        assert turn.attributes["steerboard.turn.cause"] == "steer"
        assert turn.attributes["steerboard.turn.end_reason"] == "done"
        assert call.parent.span_id == turn.context.span_id and call.kind.name == "CLIENT"
        served = one([s for s in target_spans if ids(s)[0] == TRACE_ID], "execute_tool list_agents")
        assert ids(served)[2] == f"{call.context.span_id:016x}"  # (the session's probe is a trace of its own)
        assert served["attributes"]["steerboard.transport"] == "ws"
    finally:
        if session is not None:
            await session.stop()
            await asyncio.gather(running, return_exceptions=True)
        sender_side.stop()
        target_side.stop()
        environment.close()


# The SDK's command line with the opentelemetry packages made unimportable.
WITHOUT_OPENTELEMETRY = (
    "import sys; sys.modules['opentelemetry'] = None; "
    "from steerboard_agents.__main__ import main; sys.exit(main())"
)


async def test_a_session_without_opentelemetry_takes_traced_steers_and_carries_no_trace(tmp_path):
    """The SDK runs without the optional packages: a steer frame's traceparent changes nothing
    for it, and its tool frames carry none (the server's span of its call starts a trace)."""
    import subprocess
    import sys

    from tests.support.live import ROOT

    environment = LiveEnvironment(tmp_path)
    server = servers_tracing(environment, "steerboard").start()
    agent = None
    try:
        team = environment.team_create("untraced")
        lead = team["lead"]["token"]
        async with httpx.AsyncClient(timeout=30, base_url=server.url) as http:
            spawned = await http.post("/api/v1/tools/spawn_teammate", json={"name": "impl", "description": "d", "prompt": ""},
                                      headers={"Authorization": f"Bearer {lead}"})
            assert spawned.status_code == 200, spawned.text
            token = (await asyncio.to_thread(environment.manage_json, "member_token", "untraced", "impl"))["token"]
            log = open(tmp_path / "agent.log", "ab")
            agent = subprocess.Popen(
                [sys.executable, "-c", WITHOUT_OPENTELEMETRY, "run", "--server", server.url,
                 "--model", "tests.agents.cli_model:Roster", "--max-backoff", "0.3", "-v"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'sdk'}", "STEERBOARD_TOKEN": token,
                     "OTEL_TRACES_EXPORTER": "console"},
            )
            await until(lambda: "connected to team" in (tmp_path / "agent.log").read_text(), "the session's hello")
            sent = await http.post(
                "/api/v1/tools/send_message", json={"target": "impl", "message": "please look"},
                headers={"Authorization": f"Bearer {lead}", "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
            )
            assert sent.status_code == 200, sent.text

            async def answered() -> bool:
                history = await http.get("/api/v1/session/history", headers={"Authorization": f"Bearer {token}"})
                return any(e.get("text") == "impl read the roster" for e in history.json()["entries"])

            await until(answered, "the session's turn for the traced message", timeout=60)
        await until(lambda: exported(server, "deliver impl", "send impl") and sum(
                        s["name"] == "execute_tool list_agents" for s in console_spans(server.log())) == 2,
                    "the spans of the turn")
        spans = console_spans(server.log())
        send = one(spans, "send impl")
        assert ids(one(spans, "deliver impl"))[2] == ids(send)[1]  # the server's side of the trace is whole
        calls = [s for s in spans if s["name"] == "execute_tool list_agents"]
        assert len(calls) == 2  # the session's probe and its model's call: neither in the message's trace
        assert all(ids(s)[0] != TRACE_ID and ids(s)[2] is None for s in calls)
        agent_log = (tmp_path / "agent.log").read_text()
        assert "Traceback" not in agent_log and "does not trace" in agent_log
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            agent.wait(10)
        server.stop()
        environment.close()
