"""What a log line is about: the team and member a websocket, a tool call or a request
speaks for, kept in a context variable for the JSON log lines (config/log_format.py,
``LOG_FORMAT=json``). Bound at the edge (the consumers' connect, the tool dispatch); a
line about one message names it itself (``extra={"message_id": ...}``). Also: a logger's
lines kept without their traceback where the failure is expected (``traceback_left_out``)."""
import contextvars
import logging
from collections.abc import Callable

_fields: contextvars.ContextVar[dict] = contextvars.ContextVar("steerboard_log_context", default={})  # noqa: B039


def bind(**fields) -> contextvars.Token:
    """Add these fields (empty ones are left out) to the lines logged from here on, in this
    task or thread and the tasks it starts; ``reset`` with the answer to undo."""
    return _fields.set({**_fields.get(), **{k: v for k, v in fields.items() if v not in (None, "")}})


def reset(token: contextvars.Token) -> None:
    _fields.reset(token)


def current() -> dict:
    return _fields.get()


def of_member(member) -> dict:
    """A member's fields: its team's name when the row came with it (the token lookups
    select it), else the team's id."""
    team = member._state.fields_cache.get("team")
    return {"team": team.name if team is not None else member.team_id, "member": member.name}


class _TracebackLeftOut(logging.Filter):
    def __init__(self, expected: Callable[[logging.LogRecord], bool]):
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        if self.expected(record):
            record.exc_info = None
            record.exc_text = None
        return True


def traceback_left_out(logger: str, expected: Callable[[logging.LogRecord], bool]) -> None:
    """``logger``'s lines for which ``expected`` holds keep their line and lose their
    traceback: a failure answered and counted elsewhere (a client's bad request, the
    database's absence) is not the server's to explain. Once per logger and ``expected``."""
    found = logging.getLogger(logger)
    if not any(isinstance(f, _TracebackLeftOut) and f.expected is expected for f in found.filters):
        found.addFilter(_TracebackLeftOut(expected))
