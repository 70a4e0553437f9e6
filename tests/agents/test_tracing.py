"""The SDK's traces (sdk/steerboard_agents/tracing.py): a turn's span continues the trace of
the first steered message that starts it and links the others, there at its start or let
in later; a Team tool call is a span whose context its tool frame carries; the command line
traces only when the OTEL_* variables ask. (tests/e2e/test_traces_live.py runs it all
against real servers, and without the opentelemetry packages.)"""
import asyncio
import json

import pytest

from steerboard_agents import tracing
from steerboard_agents.client import SocketTools
from tests.support.spans import sdk_in_memory_spans

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
