"""OpenTelemetry spans recorded in memory (the SDK's InMemorySpanExporter) for the tests of
mailbox/plumbing/tracing.py, and reading them."""
import contextlib

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mailbox.plumbing import tracing
from steerboard_agents import ModelReply, StepContext, ToolCall


@contextlib.contextmanager
def _in_memory(use, stop):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider)
    try:
        yield exporter
    finally:
        stop()
        provider.shutdown()


def in_memory_spans():
    """The server traces into an in-memory exporter while inside; not at all after."""
    return _in_memory(tracing.use, tracing.stop)


def sdk_in_memory_spans():
    """The SDK (steerboard_agents/tracing.py) traces into an in-memory exporter while inside."""
    from steerboard_agents import tracing as sdk_tracing

    return _in_memory(sdk_tracing.use, lambda: sdk_tracing.use(None))


def by_name(exporter, name: str):
    """The one finished span of that name."""
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    assert len(found) == 1, (name, [span.name for span in exporter.get_finished_spans()])
    return found[0]


def hex_ids(span) -> tuple[str, str]:
    """A span's trace id and span id as W3C writes them."""
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def traceparent_of(span) -> str:
    trace_id, span_id = hex_ids(span)
    return f"00-{trace_id}-{span_id}-{span.context.trace_flags:02x}"


class RosterThenAnswer:
    """A traced turn's model: reads the roster (one Team tool call), then answers in words."""

    async def step(self, context: StepContext) -> ModelReply:
        if context.step == 0:
            return ModelReply(tool_calls=[ToolCall("list_agents", {})])
        return ModelReply(text="seen")
