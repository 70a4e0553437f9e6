"""OpenTelemetry in an agent session, optional: the SDK runs without the ``opentelemetry``
packages, and then everything here does nothing.

With ``opentelemetry-api`` installed the session continues the trace a message came in
(docs/protocol.md: a ``steer`` frame's message may carry the W3C ``traceparent`` and
``tracestate`` of its send):

- each turn is a span ``invoke_agent <member>`` (GenAI's agent span:
  ``gen_ai.operation.name``, ``gen_ai.agent.name``), current while the turn runs. The
  first message that starts the turn and carries a trace context is its parent; the other
  messages of the turn, there at its start or let in at a later step boundary, are links;
- each Team tool call is a span ``execute_tool <tool>`` inside it (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``), and the call carries that span's context to the server: the
  ``traceparent`` / ``tracestate`` fields of its ``tool`` frame, or the headers of its REST
  request. The server's span of the call is its child.

The spans go to the tracer provider the program set (``opentelemetry.trace``'s global one;
``use`` for another). Without one they record nothing but still carry the message's
context on to the server. ``python -m steerboard_agents`` sets one up when the standard
``OTEL_*`` variables ask for it, as the server does (``configure``; needs
``opentelemetry-sdk``, and for OTLP ``opentelemetry-exporter-otlp-proto-http``).
"""
from __future__ import annotations

import contextlib
import logging
import os

from steerboard_protocol.tracing import TRACEPARENT, TRACESTATE, TRACESTATE_MAX, provider_from

log = logging.getLogger(__name__)

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the optional dependency is not installed: no traces
    _trace = None
    _w3c = None
else:
    _w3c = TraceContextTextMapPropagator()  # the wire's fields are W3C's, whatever OTEL_PROPAGATORS says

_provider = None  # ``use``'s; None: the global one


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed (else nothing here traces or carries)."""
    return _trace is not None


def use(provider) -> None:
    """Trace with this tracer provider rather than the global one (None: the global one again)."""
    global _provider
    _provider = provider


def configure(environ=os.environ) -> bool:
    """For the command line: when the ``OTEL_*`` variables ask for traces, a tracer provider
    exporting what they name (``otlp`` over HTTP/protobuf, ``console``), set as the global one.
    ``OTEL_SERVICE_NAME`` names the service (``steerboard-agents`` by default)."""
    provider = provider_from(environ, service="steerboard-agents", installs="pip install opentelemetry-sdk")
    if provider is None:
        return False
    _trace.set_tracer_provider(provider)
    return True


def _tracer():
    return (_provider or _trace.get_tracer_provider()).get_tracer("steerboard_agents")


def _context_of(message: dict):
    """The trace context a steered message carries (its send's), or None."""
    traceparent = message.get(TRACEPARENT)
    if _trace is None or not isinstance(traceparent, str):
        return None
    fields = {TRACEPARENT: traceparent}
    if isinstance(message.get(TRACESTATE), str):
        fields[TRACESTATE] = message[TRACESTATE]
    context = _w3c.extract(fields)
    return context if _trace.get_current_span(context).get_span_context().is_valid else None


class TurnTrace:
    """What a running turn's span is told: the messages let in later, how the turn ended."""

    def __init__(self, span=None, seen: set[str] | None = None):
        self.span = span
        self._seen = seen or set()

    def entered(self, message: dict) -> None:
        """A message entered the turn at a step boundary: linked, unless it was there at the start."""
        if self.span is None or message.get("id") in self._seen:
            return
        self._seen.add(message.get("id"))
        context = _context_of(message)
        if context is not None and hasattr(self.span, "add_link"):
            self.span.add_link(_trace.get_current_span(context).get_span_context())

    def ended(self, reason: str, error: str | None = None) -> None:
        if self.span is None:
            return
        self.span.set_attribute("steerboard.turn.end_reason", reason)
        if reason == "error":
            from opentelemetry.trace import Status, StatusCode

            self.span.set_attribute("error.type", "model_error")
            self.span.set_status(Status(StatusCode.ERROR, (error or "")[:500]))


@contextlib.contextmanager
def turn_span(*, member: str, team: str | None, turn_id: str, cause: str, messages: list[dict] = ()):
    """The span of one turn, current inside: its parent is the first of ``messages`` (those
    that start it) carrying a trace context, the others' are its links. Yields a ``TurnTrace``."""
    if _trace is None:
        yield TurnTrace()
        return
    contexts = [c for c in (_context_of(m) for m in messages) if c is not None]
    links = [_trace.Link(_trace.get_current_span(c).get_span_context()) for c in contexts[1:]]
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": member,
                  "steerboard.turn_id": turn_id, "steerboard.turn.cause": cause}
    if team:
        attributes["steerboard.team"] = team
    with _tracer().start_as_current_span(
        f"invoke_agent {member}", context=contexts[0] if contexts else None, links=links, attributes=attributes,
    ) as span:
        yield TurnTrace(span, {m.get("id") for m in messages})


@contextlib.contextmanager
def tool_span(name: str, call_id: str | None):
    """The span of one Team tool call (``trace_fields`` inside it name it to the server).
    Yields the span, or None without OpenTelemetry."""
    if _trace is None:
        yield None
        return
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    with _tracer().start_as_current_span(
        f"execute_tool {name}", kind=_trace.SpanKind.CLIENT, attributes=attributes,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        yield span


def tool_refused(span, code: str) -> None:
    if span is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", code)
        span.set_status(Status(StatusCode.ERROR, code))


def trace_fields() -> dict[str, str]:
    """The current span's W3C context as a frame's fields (or a request's headers); {} when
    there is none, or no OpenTelemetry."""
    if _trace is None or not _trace.get_current_span().get_span_context().is_valid:
        return {}
    fields: dict[str, str] = {}
    _w3c.inject(fields)
    if len(fields.get(TRACESTATE, "")) > TRACESTATE_MAX:  # more than a frame takes: dropped, as the W3C allows
        del fields[TRACESTATE]
    return {k: v for k, v in fields.items() if k in (TRACEPARENT, TRACESTATE) and v}
