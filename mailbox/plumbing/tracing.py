"""OpenTelemetry traces (docs/operations.md, "Traces"): off unless the standard ``OTEL_*``
variables ask for an exporter. Then:

- a span for each tool call (``execute_tool``), whose parent is the caller's W3C
  ``traceparent`` (and ``tracestate``) on a REST tool call or an ``/mcp`` request, or in a
  websocket ``tool`` frame;
- inside a ``send_message``, the send (a messaging ``send`` span) with its ``queued`` and
  ``accepted`` events. Its trace context is stored with the message (the writer's batch
  sets the message's ``traceparent`` and ``tracestate`` columns) and carried in each of
  the message's ``steer`` frames, whichever process pushes it and however late;
- the message's ``deliver`` span, in the process that records its delivery: a child of the
  send's context that runs from the send's commit to the delivery's, with the events
  ``queued``, ``accepted``, ``pushed`` (each steer frame this process's websocket sent to
  the target) and ``delivered``. It is made when the delivery commits, from the times the
  message's row holds: a span left open from the send would be lost with its process, and
  the delivery may come in another process, or after a restart;
- an ``/a2a`` request's ``traceparent`` is the parent of its A2A send's span;
- each writer batch (mailbox/plumbing/writer.py) is a span of its own, linked to the span each of
  its jobs was queued in (a send's, inside its tool call's).

Attribute names follow the semantic conventions where one fits: GenAI's ``execute_tool``
(``gen_ai.tool.name``), messaging's ``send`` and ``process`` (``messaging.system``,
``messaging.destination.name``, ``messaging.message.id``), the database's batch size
(``db.operation.batch.size``).

Off, nothing here touches the opentelemetry packages (they are an optional dependency:
``pip install steerboard[otel]``): each hook is one module flag test.
"""
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime

from steerboard_protocol.tracing import (
    TRACEPARENT, TRACESTATE, TRACESTATE_MAX, provider_from, traces_asked,
)

log = logging.getLogger(__name__)

enabled = False
_tracer = None
_w3c = None  # W3C Trace Context's propagator: the wire's fields are W3C's, whatever OTEL_PROPAGATORS says

# When this process's websockets pushed each traced message to its target, until its
# delivery's span takes them (or the oldest go, past this many).
_PUSHES_KEPT = 10_000
_pushes: OrderedDict[str, list[int]] = OrderedDict()
_pushes_lock = threading.Lock()


def asked(environ=os.environ) -> bool:
    return traces_asked(environ)


def configure(environ=os.environ) -> bool:
    """At start-up (mailbox/apps.py): a tracer provider exporting what the OTEL_* variables
    say (``otlp``, the default, over HTTP/protobuf; ``console``), when they ask for one."""
    provider = provider_from(environ, service="steerboard", installs="pip install steerboard[otel]")
    if provider is None:
        return False
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # the process's, for whatever else traces in it
    use(provider)
    return True


def use(provider) -> None:
    """Trace with this tracer provider from now on (``configure``; tests hand an in-memory one)."""
    global enabled, _tracer, _w3c
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _w3c = TraceContextTextMapPropagator()
    _tracer = provider.get_tracer("steerboard")
    enabled = True


def stop() -> None:
    """No more spans (tests)."""
    global enabled, _tracer
    enabled, _tracer = False, None
    with _pushes_lock:
        _pushes.clear()


def _parent(headers):
    """The caller's trace context from W3C ``traceparent`` / ``tracestate`` headers (ASGI's
    (name, value) byte pairs), or None."""
    if not headers:
        return None
    carrier = {}
    for name, value in headers:
        name = name.lower()
        if name in (b"traceparent", b"tracestate"):
            carrier[name.decode("latin-1")] = value.decode("latin-1")
    if TRACEPARENT not in carrier:
        return None
    return _w3c.extract(carrier)


def frame_headers(frame) -> list[tuple[bytes, bytes]] | None:
    """A websocket ``tool`` frame's ``traceparent`` / ``tracestate`` as a request's headers."""
    if not enabled or not frame.traceparent:
        return None
    headers = [(b"traceparent", frame.traceparent.encode("latin-1", "replace"))]
    if frame.tracestate:
        headers.append((b"tracestate", frame.tracestate.encode("latin-1", "replace")))
    return headers


@contextlib.contextmanager
def tool_span(*, name: str, team, member: str, transport: str, headers=None):
    """The span of one tool call; the caller's ``traceparent`` header, if any, is its parent.
    Yields the span (None when tracing is off); a refusal sets ``error.type`` to its code."""
    if not enabled:
        yield None
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    with _tracer.start_as_current_span(
        f"execute_tool {name}", context=_parent(headers), kind=SpanKind.SERVER,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "steerboard.team": str(team),
                    "steerboard.member": member, "steerboard.transport": transport},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            code = getattr(exc, "code", None)
            span.set_attribute("error.type", str(code) if code is not None else type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(code) if code is not None else "the server failed"))
            if code is None:
                span.record_exception(exc)
            raise


@contextlib.contextmanager
def send_span(*, sender, target: str):
    """The span of one ``send_message``'s send (a messaging ``send``) by ``sender`` (a Member);
    ``sent`` below adds what the writer did with it."""
    if not enabled:
        yield None
        return
    from opentelemetry.trace import SpanKind

    from mailbox.plumbing.log_context import of_member

    team = of_member(sender)["team"]

    with _tracer.start_as_current_span(
        f"send {target}", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "steerboard", "messaging.operation.type": "send",
                    "messaging.operation.name": "send", "messaging.destination.name": target,
                    "steerboard.team": str(team), "steerboard.sender": sender.name},
    ) as span:
        yield span


def sent(span, *, message_id: str, thread_id: str, seq: int | None, admitted: bool, replayed: bool) -> None:
    """The send's message and what happened to it in the writer's commit: ``queued`` and, for
    a push in the same commit, ``accepted``."""
    if span is None:
        return
    span.set_attribute("messaging.message.id", message_id)
    span.set_attribute("messaging.message.conversation_id", thread_id or message_id)
    if replayed:
        span.set_attribute("steerboard.idempotent_replay", True)
        return
    if seq is not None:
        span.set_attribute("steerboard.seq", seq)
    span.add_event("queued")
    if admitted:
        span.add_event("accepted")


# --- a message's trace context, stored with it and carried in its steer frames --------------------
def carrier(span) -> tuple[str, str | None] | None:
    """``span``'s W3C trace context as (traceparent, tracestate), to store with a message; None
    when there is no span. A tracestate longer than a frame carries is left out (the W3C lets a
    vendor drop it)."""
    if span is None:
        return None
    from opentelemetry.trace import set_span_in_context

    fields: dict[str, str] = {}
    _w3c.inject(fields, context=set_span_in_context(span))
    if TRACEPARENT not in fields:
        return None
    state = fields.get(TRACESTATE) or None
    return fields[TRACEPARENT], state if state is None or len(state) <= TRACESTATE_MAX else None


def fields(span) -> dict[str, str]:
    """``span``'s context as a frame's optional ``traceparent`` / ``tracestate`` fields (none
    when tracing is off)."""
    context = carrier(span)
    if context is None:
        return {}
    traceparent, tracestate = context
    return {TRACEPARENT: traceparent, **({TRACESTATE: tracestate} if tracestate else {})}


def pushed(message: dict) -> None:
    """A steer frame of ``message`` left on this process's websocket to its target: the time,
    for the ``pushed`` event of its delivery's span (``delivered``). Only a traced message's."""
    if TRACEPARENT not in message:
        return
    now = time.time_ns()
    with _pushes_lock:
        times = _pushes.get(message["id"])
        if times is None:
            _pushes[message["id"]] = times = []
            if len(_pushes) > _PUSHES_KEPT:
                _pushes.popitem(last=False)
        if len(times) < 16:  # a message pushed again and again: its first pushes tell the story
            times.append(now)


def _ns(value) -> int:
    """A time as the database driver returned it (SQLite: ISO text) in nanoseconds since the epoch."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:  # stored as UTC (USE_TZ)
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1_000_000_000)


def delivered(*, member, message_id: str, seq: int, queued_at, accepted_at, traceparent: str | None,
              tracestate: str | None) -> None:
    """After the commit that recorded a message delivered to ``member`` (a Member): the
    message's ``deliver`` span, child of its send's (``traceparent``, as its row holds it),
    from its send's commit to now, with the events ``queued``, ``accepted``, ``pushed`` (by
    this process) and ``delivered``. Nothing for a message sent without a trace."""
    if not traceparent:
        return
    from opentelemetry.trace import SpanKind

    from mailbox.plumbing.log_context import of_member

    parent = _w3c.extract({TRACEPARENT: traceparent, **({TRACESTATE: tracestate} if tracestate else {})})
    now = time.time_ns()
    start = min(_ns(queued_at), now)
    with _pushes_lock:
        pushes = _pushes.pop(message_id, [])
    events = [("queued", start)]
    if accepted_at is not None:
        events.append(("accepted", _ns(accepted_at)))
    events += [("pushed", at) for at in pushes]
    events.sort(key=lambda event: event[1])  # stable: at one instant, queued, accepted, pushed
    span = _tracer.start_span(
        f"deliver {member.name}", context=parent, kind=SpanKind.CONSUMER, start_time=start,
        attributes={"messaging.system": "steerboard", "messaging.operation.type": "process",
                    "messaging.operation.name": "deliver", "messaging.destination.name": member.name,
                    "messaging.message.id": message_id, "steerboard.seq": seq,
                    "steerboard.team": str(of_member(member)["team"]), "steerboard.pushes": len(pushes)},
    )
    for name, at in events:
        span.add_event(name, timestamp=max(start, min(at, now)))
    span.add_event("delivered", timestamp=now)
    span.end(end_time=now)


# --- the writer's batches ------------------------------------------------------------------------
def current_link():
    """The span under way here (its context), for the writer batch that will carry this job;
    None when there is none."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return context if context.is_valid else None


@contextlib.contextmanager
def batch_span(jobs: list, *, database: str):
    """The span of one writer batch (on the writer thread), linked to the span each job was
    queued in (``current_link``). Yields the span."""
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    links = [Link(job.trace_link) for job in jobs if job.trace_link is not None]
    with _tracer.start_as_current_span(
        "writer batch", context=Context(), links=links,
        attributes={"db.system.name": database, "db.operation.batch.size": len(jobs)},
    ) as span:
        yield span


def batch_failed(span, errors: list[BaseException]) -> None:
    """Jobs of the batch failed (not refused): the first one's error on the batch's span."""
    if not errors:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", type(errors[0]).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{len(errors)} of the batch's jobs failed"))


# --- /a2a --------------------------------------------------------------------------------------
@contextlib.contextmanager
def request_context(headers):
    """An ``/a2a`` request's caller's trace (its ``traceparent`` header) current for what the
    request does, so its A2A send's span is that trace's child."""
    parent = _parent(headers) if enabled else None
    if parent is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


@contextlib.contextmanager
def prompt_span(*, team: str, target: str, transport: str):
    """The span of a person's prompt sent to ``target`` (an A2A ``SendMessage``): a messaging
    ``send``, child of the current context (the request's ``traceparent``). Yields the span
    (None when tracing is off); ``prompt_queued`` adds what was stored."""
    if not enabled:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span(
        f"send {target}", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "steerboard", "messaging.operation.type": "send",
                    "messaging.operation.name": "send", "messaging.destination.name": target,
                    "steerboard.team": team, "steerboard.transport": transport},
    ) as span:
        yield span


def prompt_queued(span, *, prompt_id: str | None, task_id: str) -> None:
    if span is None:
        return
    if prompt_id:
        span.set_attribute("messaging.message.id", prompt_id)
    span.set_attribute("steerboard.a2a.task_id", task_id)
    span.add_event("queued")
