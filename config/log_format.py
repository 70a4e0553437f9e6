"""``LOG_FORMAT=json``: one JSON object per line, for log shippers (docs/operations.md,
"Monitoring"). Each line has the time (UTC), level, logger, message and process id, and
where they apply the team, member and message id (mailbox/plumbing/log_context.py; a record's
``extra``) and the trace and span ids of the OpenTelemetry span it was logged in."""
import json
import logging
from datetime import UTC, datetime

from mailbox.plumbing import log_context

RECORD_FIELDS = ("team", "member", "message_id", "trace_id", "span_id")


def _span_ids() -> dict:
    try:
        from opentelemetry import trace
    except ImportError:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            **log_context.current(),
            **_span_ids(),
        }
        for field in RECORD_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                line[field] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)
