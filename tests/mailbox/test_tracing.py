"""OpenTelemetry traces (mailbox/plumbing/tracing.py, issue 29 item 2): a span for each tool call
whose parent is the caller's W3C traceparent on REST, /mcp and websocket tool frames; inside
a send_message the send's span with its message id and its queued / accepted events; the
send's context stored with the message and carried in each of its steer frames (the push at
the send, a hello's replay, recovery's re-push); the message's deliver span from the send to
the entry that delivers it (queued, accepted, pushed, delivered); the writer's batch as a
span linked to the sends it carried; nothing at all while OTEL_* asks for nothing. Recorded
with the SDK's in-memory exporter."""
import asyncio

import pytest
from channels.db import database_sync_to_async

from mailbox.engine import delivery
from mailbox.models import TeamMessage
from mailbox.plumbing import tracing
from tests.support.inproc import Agent, spawn, team_new, token_for
from tests.support.spans import by_name, hex_ids, in_memory_spans, traceparent_of

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def spans():
    with in_memory_spans() as exporter:
        yield exporter


async def traced_send(api, spans, **extra_headers):
    """The Lead's REST send_message to a connected, idle impl, with the caller's traceparent;
    the spans of the set-up cleared first."""
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    impl = Agent(await token_for("alpha", "impl"))
    await impl.connect("idle")
    spans.clear()
    response = await api.http.post(
        "/api/v1/tools/send_message", json={"target": "impl", "message": "traced"},
        headers={"Authorization": f"Bearer {team['lead']}", "traceparent": f"00-{TRACE_ID}-{PARENT}-01",
                 **extra_headers},
    )
    return team, impl, response


async def test_a_rest_send_continues_the_callers_trace_with_the_send_and_its_events(api, spans):
    team, impl, response = await traced_send(api, spans)
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
    answered = await lead.expect("tool_result")
    assert "result" in answered
    await lead.send({"type": "tool", "id": "c2", "name": "list_agents", "arguments": {}, "traceparent": "garbage"})
    assert "result" in await lead.expect("tool_result")  # a context that does not parse is ignored
    await lead.send({"type": "tool", "id": "c3", "name": "send_message", "arguments": {"target": "nobody", "message": "x"},
                     "traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    refused = await lead.expect("tool_result")
    assert refused["error"]["code"] == "TEAM_UNKNOWN_TARGET"
    first, second, _ = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool")]
    assert f"{first.context.trace_id:032x}" == TRACE_ID and f"{first.parent.span_id:016x}" == PARENT
    assert first.attributes["steerboard.transport"] == "ws"
    assert f"{second.context.trace_id:032x}" != TRACE_ID
    # The answer names the server's span of the call, in the caller's trace (a refusal's too).
    assert answered["traceparent"] == f"00-{TRACE_ID}-{first.context.span_id:016x}-01"
    call = next(s for s in spans.get_finished_spans() if s.name == "execute_tool send_message")
    assert refused["traceparent"] == f"00-{TRACE_ID}-{call.context.span_id:016x}-01"
    await lead.close()


@database_sync_to_async
def stored_trace(message_id: str) -> tuple:
    return TeamMessage.objects.values_list("traceparent", "tracestate").get(pk=message_id)


async def test_a_messages_trace_goes_from_the_senders_call_to_the_targets_history_entry(api, spans):
    team, impl, response = await traced_send(api, spans, tracestate="vendor=a")
    assert response.status_code == 200, response.text
    message_id = response.json()["message_id"]
    send = by_name(spans, "send impl")
    # The steer frame carries the send's context, as the message's row stores it.
    steer = (await impl.expect("steer"))["message"]
    assert steer["id"] == message_id
    assert steer["traceparent"] == traceparent_of(send) and steer["tracestate"] == "vendor=a"
    assert await stored_trace(message_id) == (steer["traceparent"], "vendor=a")
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("deliver")]  # not delivered yet

    await impl.integrate(steer)
    deliver = by_name(spans, "deliver impl")
    assert deliver.parent.span_id == send.context.span_id and deliver.context.trace_id == send.context.trace_id
    assert hex_ids(deliver)[0] == TRACE_ID  # the caller's trace, from its call to the history entry
    assert [event.name for event in deliver.events] == ["queued", "accepted", "pushed", "delivered"]
    times = [event.timestamp for event in deliver.events]
    assert times == sorted(times) and deliver.start_time == times[0] and deliver.end_time == times[-1]
    assert deliver.attributes["messaging.message.id"] == message_id
    assert deliver.attributes["messaging.destination.name"] == "impl"
    assert deliver.attributes["messaging.operation.type"] == "process"
    assert deliver.attributes["steerboard.seq"] == steer["seq"]
    assert deliver.kind.name == "CONSUMER"
    # An entry that reports its usage runs the traced statement with usage (PostgreSQL) as well.
    await impl.send({"type": "entry", "entry": {"id": "reply-1", "kind": "assistant_text", "text": "ok",
                                                "usage": {"model": "m", "input_tokens": 3, "output_tokens": 2}}})
    assert (await impl.expect("ack"))["folded"] is False
    await impl.close()


async def test_a_steer_pushed_later_by_a_replay_or_recovery_still_carries_the_sends_trace(api, spans):
    team = await team_new()
    token = await spawn(api, team["lead"], "alpha", "impl")
    sent = await api.ok(team["lead"], "send_message", target="impl", message="waits for a session")
    send = by_name(spans, "send impl")
    assert [event.name for event in send.events] == ["queued"]  # no session: not accepted
    impl = Agent(token)
    welcome = await impl.connect("idle")
    assert welcome["replay"] == 1
    replayed = (await impl.expect("steer"))["message"]
    assert replayed["id"] == sent["message_id"] and replayed["traceparent"] == traceparent_of(send)
    assert "tracestate" not in replayed
    # Recovery (or an operator's retry) pushes an undelivered message again: the same context, from its row.
    target_id = await database_sync_to_async(
        lambda: TeamMessage.objects.values_list("target_id", flat=True).get(pk=sent["message_id"]))()
    await database_sync_to_async(delivery.target_admit)(target_id=target_id, redeliver=True)
    again = (await impl.expect("steer"))["message"]
    assert again["id"] == sent["message_id"] and again["traceparent"] == traceparent_of(send)
    await impl.integrate(again)
    deliver = by_name(spans, "deliver impl")
    assert deliver.parent.span_id == send.context.span_id
    assert [event.name for event in deliver.events] == ["queued", "accepted", "pushed", "pushed", "delivered"]
    await impl.close()


async def test_each_writer_batch_is_a_span_linked_to_the_sends_it_carried(api, spans):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    await spawn(api, team["lead"], "alpha", "qa")
    spans.clear()
    answers = await asyncio.gather(*(
        api.ok(team["lead"], "send_message", target=target, message=f"m{n}")
        for n, target in enumerate(["impl", "qa"] * 4)
    ))
    sends = {s.attributes["messaging.message.id"]: s for s in spans.get_finished_spans() if s.name.startswith("send ")}
    assert set(sends) == {a["message_id"] for a in answers}
    batches = [s for s in spans.get_finished_spans() if s.name == "writer batch"]
    linked = [link.context.span_id for batch in batches for link in batch.links]
    assert sorted(linked) == sorted(s.context.span_id for s in sends.values())  # each send in one batch
    assert sum(b.attributes["db.operation.batch.size"] for b in batches) >= len(sends)
    assert {b.attributes["db.system.name"] for b in batches} <= {"postgresql", "sqlite"}
    assert all(batch.parent is None for batch in batches)


async def test_with_tracing_off_a_message_stores_and_carries_no_trace(api, spans):
    tracing.stop()
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    impl = Agent(await token_for("alpha", "impl"))
    await impl.connect("idle")
    response = await api.http.post(
        "/api/v1/tools/send_message", json={"target": "impl", "message": "untraced"},
        headers={"Authorization": f"Bearer {team['lead']}", "traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
    )
    steer = (await impl.expect("steer"))["message"]
    assert "traceparent" not in steer and "tracestate" not in steer
    assert await stored_trace(response.json()["message_id"]) == (None, None)
    await impl.integrate(steer)
    assert spans.get_finished_spans() == ()
    await impl.close()


def test_with_tracing_off_the_hot_paths_statements_leave_the_trace_columns_alone():
    """Off, a send and a delivery run the statements they ran before traces: the trace columns
    are read by the ``_traced`` variants and written by the batch's own statement only."""
    from django.db import connection

    from mailbox.engine import hot_sql

    sql = hot_sql.statements(connection)
    untraced = [sql.message_insert, sql.mark_delivered, sql.send_piped, sql.send_piped_keyed, sql.entry_piped,
                sql.entry_piped_usage]
    assert not [s for s in untraced if s is not None and "trace" in s]
    assert "traceparent" in sql.mark_delivered_traced and "traceparent" in sql.message_traced
    if connection.vendor == "postgresql":
        assert "traceparent" in sql.entry_piped_traced and "traceparent" in sql.entry_piped_usage_traced
