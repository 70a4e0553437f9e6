"""The SDK's traces (sdk/steerboard_agents/tracing.py): a turn's span continues the trace of
the first steered message that starts it and links the others, there at its start or let
in later; a Team tool call is a span whose context its tool frame carries; the command line
traces only when the OTEL_* variables ask; and one message's trace from the sender's call
through a session's turn to its history entry, against the application served in-process.
(tests/e2e/test_traces_live.py runs it across two daphne processes, and without the
opentelemetry packages.)"""
import asyncio
import json

import httpx
import pytest

from steerboard_agents import AgentSession, tracing
from steerboard_agents.client import SocketTools
from tests.agents.test_session_folding import until
from tests.support.inproc import manage_json
from tests.support.spans import RosterThenAnswer, by_name, hex_ids, in_memory_spans, sdk_in_memory_spans

TRACES = ["4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c", "5b8aa5a2d2c872e8321cf37308d69df2"]
SPAN = "00f067aa0ba902b7"


def steered(n: int, trace: int | None = None) -> dict:
    message = {"id": f"m{n}", "sender": "lead", "seq": n, "content": "x"}
    if trace is not None:
        message["traceparent"] = f"00-{TRACES[trace]}-{SPAN}-01"
        message["tracestate"] = f"v=t{trace}"
    return message


@pytest.fixture
def spans():
    with sdk_in_memory_spans() as exporter:
        yield exporter


def test_a_turn_continues_its_first_traced_message_and_links_the_others(spans):
    starting = [steered(1), steered(2, trace=0), steered(3, trace=1)]
    with tracing.turn_span(member="impl", team="alpha", turn_id="t1", cause="steer", messages=starting) as turn:
        for message in starting:
            turn.entered(message)  # those the turn started with are not linked again
        turn.entered(steered(4, trace=2))  # let in at a later step boundary
        turn.entered(steered(5))
        turn.ended("done")
    [span] = spans.get_finished_spans()
    assert span.name == "invoke_agent impl"
    assert f"{span.context.trace_id:032x}" == TRACES[0] and f"{span.parent.span_id:016x}" == SPAN
    assert [f"{link.context.trace_id:032x}" for link in span.links] == [TRACES[1], TRACES[2]]
    assert span.attributes["gen_ai.agent.name"] == "impl" and span.attributes["steerboard.turn.end_reason"] == "done"


def test_a_turn_without_traced_messages_starts_a_trace_and_a_failed_one_is_an_error(spans):
    with tracing.turn_span(member="impl", team=None, turn_id="t1", cause="prompt", messages=[]) as turn:
        turn.ended("error", "the model failed")
    [span] = spans.get_finished_spans()
    assert span.parent is None and span.status.status_code.name == "ERROR"


async def test_a_tool_frame_carries_the_context_of_its_calls_span(spans):
    frames: list[dict] = []

    async def send(text: str) -> None:
        frames.append(json.loads(text))

    tools = SocketTools(send)
    tools.welcomed()
    with tracing.turn_span(member="impl", team="alpha", turn_id="t1", cause="steer", messages=[steered(1, trace=0)]):
        with tracing.tool_span("list_agents", "call-1") as span:
            call = asyncio.ensure_future(tools.call("list_agents", {}, timeout=5))
            while not frames:
                await asyncio.sleep(0)
            tools.answer({"type": "tool_result", "id": frames[0]["id"], "result": {"agents": []}})
            await call
    assert frames[0]["traceparent"] == f"00-{TRACES[0]}-{span.get_span_context().span_id:016x}-01"
    assert frames[0]["tracestate"] == "v=t0"
    call_span = [s for s in spans.get_finished_spans() if s.name == "execute_tool list_agents"][0]
    assert call_span.attributes["gen_ai.tool.call.id"] == "call-1" and call_span.kind.name == "CLIENT"
    frames.clear()
    outside = asyncio.ensure_future(tools.call("list_agents", {}, timeout=5))  # no span: no trace fields
    while not frames:
        await asyncio.sleep(0)
    tools.answer({"type": "tool_result", "id": frames[0]["id"], "result": {}})
    await outside
    assert "traceparent" not in frames[0]


def test_the_command_line_traces_only_when_the_otel_variables_ask():
    assert not tracing.configure({})
    assert not tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})


CALLER_SPAN = "b7ad6b7169203331"


@pytest.fixture
def server_spans():
    with in_memory_spans() as exporter:
        yield exporter


def parent_of(span) -> str | None:
    return f"{span.parent.span_id:016x}" if span.parent else None


async def test_one_messages_trace_goes_from_the_senders_call_through_the_sessions_turn_to_its_history(
    served, server_spans, spans
):
    """The server and the SDK's session each trace into a provider of their own; the test
    follows the parents from the caller's span to the server's span of the session's call."""
    trace_id = TRACES[1]
    team = await manage_json("team_create", "traced")
    lead = {"Authorization": f"Bearer {team['lead']['token']}"}
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        spawned = await http.post("/api/v1/tools/spawn_teammate", json={"name": "impl", "description": "d",
                                  "prompt": ""}, headers=lead)
        assert spawned.status_code == 200, spawned.text
        token = (await manage_json("member_token", "traced", "impl"))["token"]
        session = AgentSession(served.url, token, RosterThenAnswer(), max_backoff=0.3)
        running = asyncio.create_task(session.run())
        try:
            await asyncio.wait_for(session.connected.wait(), 30)
            sent = await http.post("/api/v1/tools/send_message", json={"target": "impl", "message": "please look"},
                                   headers={**lead, "traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"})
            assert sent.status_code == 200, sent.text
            message_id = sent.json()["message_id"]
            await until(lambda: any(s.name == "invoke_agent impl" for s in spans.get_finished_spans()),
                        "the target's turn", timeout=60)
            history = await http.get("/api/v1/session/history", headers={"Authorization": f"Bearer {token}"})
            entry = [e for e in history.json()["entries"] if (e.get("source") or {}).get("message_id") == message_id]
            assert len(entry) == 1 and entry[0]["kind"] == "user_message"  # the target's history holds it
        finally:
            await session.stop()
            await asyncio.gather(running, return_exceptions=True)

    finished = server_spans.get_finished_spans()
    # The caller's trace goes on into its call and the send.
    tool = by_name(server_spans, "execute_tool send_message")
    assert hex_ids(tool)[0] == trace_id and parent_of(tool) == CALLER_SPAN
    send = by_name(server_spans, "send impl")
    assert hex_ids(send)[0] == trace_id and parent_of(send) == hex_ids(tool)[1]
    assert send.attributes["messaging.message.id"] == message_id
    assert [e.name for e in send.events] == ["queued", "accepted"]
    batches = [s for s in finished if s.name == "writer batch"
               and any(link.context.span_id == send.context.span_id for link in s.links)]
    assert len(batches) == 1  # the batch that stored it, linked to its send
    # The delivery, from the send to the history entry.
    deliver = by_name(server_spans, "deliver impl")
    assert hex_ids(deliver)[0] == trace_id and parent_of(deliver) == hex_ids(send)[1]
    assert [e.name for e in deliver.events] == ["queued", "accepted", "pushed", "delivered"]
    assert deliver.attributes["messaging.message.id"] == message_id

    # The session's turn continues the send's trace (the steer frame carried it), and its tool
    # call carries the trace to the server, whose span of the call is its child.
    sdk = {s.name: s for s in spans.get_finished_spans()}
    turn, call = sdk["invoke_agent impl"], sdk["execute_tool list_agents"]
    assert hex_ids(turn)[0] == trace_id and parent_of(turn) == hex_ids(send)[1]
    assert turn.attributes["steerboard.turn.cause"] == "steer"
    assert turn.attributes["steerboard.turn.end_reason"] == "done"
    assert call.parent.span_id == turn.context.span_id and call.kind.name == "CLIENT"
    [served_call] = [s for s in finished if s.name == "execute_tool list_agents" and hex_ids(s)[0] == trace_id]
    assert parent_of(served_call) == hex_ids(call)[1]  # (the session's probe is a trace of its own)
    assert served_call.attributes["steerboard.transport"] == "ws"
