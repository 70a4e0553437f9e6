"""OpenTelemetry traces (mailbox/tracing.py, issue 29 item 2, as far as built): a span for each
tool call whose parent is the caller's W3C traceparent on REST and /mcp, and inside a
send_message the send's span with its message id and its queued / accepted events; nothing
at all while OTEL_* asks for nothing. Recorded with the SDK's in-memory exporter."""
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mailbox import tracing
from tests.support.inproc import Agent, spawn, team_new, token_for

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.stop()


async def test_a_rest_send_continues_the_callers_trace_with_the_send_and_its_events(api, spans):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    impl = Agent(await token_for("alpha", "impl"))
    await impl.connect("idle")
    spans.clear()
    response = await api.http.post(
        "/api/v1/tools/send_message", json={"target": "impl", "message": "traced"},
        headers={"Authorization": f"Bearer {team['lead']}", "traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
    )
    assert response.status_code == 200, response.text
    sent = response.json()
    finished = {span.name: span for span in spans.get_finished_spans()}
    tool, send = finished["execute_tool send_message"], finished["send impl"]
    assert f"{tool.context.trace_id:032x}" == TRACE_ID and f"{tool.parent.span_id:016x}" == PARENT
    assert tool.attributes["gen_ai.tool.name"] == "send_message"
    assert tool.attributes["steerboard.team"] == "alpha" and tool.attributes["steerboard.member"] == "lead"
    assert tool.attributes["steerboard.transport"] == "rest"
    assert send.parent.span_id == tool.context.span_id and send.context.trace_id == tool.context.trace_id
    assert send.attributes["messaging.system"] == "steerboard"
    assert send.attributes["messaging.destination.name"] == "impl"
    assert send.attributes["messaging.message.id"] == sent["message_id"]
    assert [event.name for event in send.events] == ["queued", "accepted"]
    await impl.close()


async def test_a_refused_call_is_an_error_span_with_its_code_and_no_trace_header_starts_a_trace(api, spans):
    team = await team_new()
    refused = await api.tool(team["lead"], "send_message", target="nobody", message="x")
    assert refused.status_code == 404
    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool send_message"]
    assert span.parent is None
    assert span.attributes["error.type"] == "TEAM_UNKNOWN_TARGET"
    assert span.status.status_code.name == "ERROR"


async def test_with_tracing_off_no_span_is_made(api, spans):
    team = await team_new()
    await api.ok(team["lead"], "list_agents")
    assert spans.get_finished_spans()
    spans.clear()
    tracing.stop()
    await api.ok(team["lead"], "list_agents")
    assert spans.get_finished_spans() == ()


def test_only_the_otel_variables_turn_tracing_on():
    assert not tracing.asked({})
    assert not tracing.asked({"OTEL_SERVICE_NAME": "x"})
    assert tracing.asked({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.asked({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.asked({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing.asked({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})


async def test_an_mcp_tool_call_continues_the_callers_trace(api, spans):
    team = await team_new()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_agents", "arguments": {}}}
    headers = {"Authorization": f"Bearer {team['lead']}", "Accept": "application/json, text/event-stream",
               "traceparent": f"00-{TRACE_ID}-{PARENT}-01"}
    response = await api.http.post("/mcp", json=call, headers=headers)
    assert response.status_code == 200, response.text
    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool list_agents"]
    assert f"{span.context.trace_id:032x}" == TRACE_ID and f"{span.parent.span_id:016x}" == PARENT
    assert span.attributes["steerboard.transport"] == "mcp"


def test_a_json_log_line_inside_a_span_names_its_trace(spans):
    import json
    import logging

    from config.log_format import JsonFormatter

    record = None
    with tracing.tool_span(name="list_agents", team="alpha", member="lead", transport="rest") as span:
        record = logging.LogRecord("steerboard.test", logging.WARNING, __file__, 1, "inside", None, None)
        line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"


async def test_a_websocket_tool_frame_continues_the_trace_its_traceparent_names(api, spans):
    team = await team_new()
    lead = Agent(team["lead"])
    await lead.connect("running")
    await lead.send({"type": "tool", "id": "c1", "name": "list_agents", "arguments": {},
                     "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert "result" in await lead.expect("tool_result")
    await lead.send({"type": "tool", "id": "c2", "name": "list_agents", "arguments": {}, "traceparent": "garbage"})
    assert "result" in await lead.expect("tool_result")  # a context that does not parse is ignored
    first, second = [s for s in spans.get_finished_spans() if s.name == "execute_tool list_agents"]
    assert f"{first.context.trace_id:032x}" == TRACE_ID and f"{first.parent.span_id:016x}" == PARENT
    assert first.attributes["steerboard.transport"] == "ws"
    assert f"{second.context.trace_id:032x}" != TRACE_ID
    await lead.close()
