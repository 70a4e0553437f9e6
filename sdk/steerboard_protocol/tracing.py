"""Traces across the wire (docs/operations.md, "Traces"; docs/protocol.md): the W3C trace
context's fields as frames carry them, and which of OpenTelemetry's standard ``OTEL_*``
variables ask a process to trace. The server (mailbox/plumbing/tracing.py) and the SDK
(steerboard_agents/tracing.py) follow the same rule; nothing here imports OpenTelemetry
until ``provider_from`` is called, and then only what is installed.
"""
import logging
import os

log = logging.getLogger(__name__)

# A frame's (or a steer's message's) trace context: W3C Trace Context's two headers, by name.
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"
# The longest a frame's fields may be (mailbox/plumbing/wire.py checks a tool frame's; a longer
# tracestate from an HTTP header is not stored with a message: the W3C lets it be dropped).
TRACEPARENT_MAX, TRACESTATE_MAX = 128, 512

# The variables that ask for traces: an exporter named, or an OTLP endpoint given.
_ASKING = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def traces_asked(environ=os.environ) -> bool:
    """Whether the environment asks for traces: an exporter or an OTLP endpoint named, and
    neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``."""
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return any(environ.get(name) for name in _ASKING)


def exporters(environ=os.environ) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` when only an endpoint is given)."""
    return [name.strip().lower() for name in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if name.strip()]


def provider_from(environ=os.environ, *, service: str, installs: str):
    """When the environment asks for traces: a tracer provider exporting to what it names
    (``otlp`` over HTTP/protobuf, ``console``), its service ``OTEL_SERVICE_NAME`` or
    ``service``; else None. None too, with a warning naming ``installs`` (what to install),
    when ``opentelemetry-sdk`` is not there."""
    if not traces_asked(environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning("OTEL_* asks for traces but opentelemetry-sdk is not installed (%s): this process does not trace", installs)
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", service)}))
    for name in exporters(environ):
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
            log.warning("OTEL_TRACES_EXPORTER=%s: not an exporter this knows (otlp, console)", name)
    return provider
