"""OpenTelemetry traces (docs/operations.md, "Traces"): off unless the standard ``OTEL_*``
variables ask for an exporter, and then a span for each tool call and, inside a
``send_message``, one for the send with its ``queued`` and ``accepted`` events.

A caller's W3C ``traceparent`` (and ``tracestate``) on a REST tool call or an ``/mcp``
request, or in a websocket ``tool`` frame, is the parent of the tool call's span, so a trace follows the call from the
sender's own. Attribute names follow the semantic conventions where one fits: GenAI's
``execute_tool`` span (``gen_ai.tool.name``) for a tool call, messaging's ``send`` span
(``messaging.system``, ``messaging.destination.name``, ``messaging.message.id``) for a send.

Off, nothing here touches the opentelemetry packages (they are an optional dependency:
``pip install steerboard[otel]``): each hook is one module flag test.
"""
import contextlib
import logging
import os

log = logging.getLogger(__name__)

enabled = False
_tracer = None

# The variables that ask for traces: an exporter named, or an OTLP endpoint given.
_ASKING = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def asked(environ=os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return any(environ.get(name) for name in _ASKING)


def configure(environ=os.environ) -> bool:
    """At start-up (mailbox/apps.py): a tracer provider exporting what the OTEL_* variables
    say (``otlp``, the default, over HTTP/protobuf; ``console``), when they ask for one."""
    if not asked(environ):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning("OTEL_* asks for traces but opentelemetry-sdk is not installed (pip install steerboard[otel])")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "steerboard")}))
    for name in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http")
                continue
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s: not an exporter Steerboard knows (otlp, console)", name)
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # the process's, for whatever else traces in it
    use(provider)
    return True


def use(provider) -> None:
    """Trace with this tracer provider from now on (``configure``; tests hand an in-memory one)."""
    global enabled, _tracer
    _tracer = provider.get_tracer("steerboard")
    enabled = True


def stop() -> None:
    """No more spans (tests)."""
    global enabled, _tracer
    enabled, _tracer = False, None


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
    if "traceparent" not in carrier:
        return None
    from opentelemetry.propagate import extract

    return extract(carrier)


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

    from mailbox.log_context import of_member

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
