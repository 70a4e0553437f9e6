"""The one error vocabulary of Steerboard.

Services raise ``TeamError`` with an ``ErrorCode``; the REST layer and the
websocket consumers translate it to the wire shape
``{"error": {"code", "message"}}`` with the HTTP status below.
"""
from enum import StrEnum


class ErrorCode(StrEnum):
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    LEAD_ONLY = "LEAD_ONLY"
    TEAM_UNKNOWN_TARGET = "TEAM_UNKNOWN_TARGET"
    TEAM_TARGET_RETIRED = "TEAM_TARGET_RETIRED"
    TEAM_TARGET_FAILED = "TEAM_TARGET_FAILED"
    TEAM_SELF_MESSAGE = "TEAM_SELF_MESSAGE"
    TEAM_MESSAGE_TOO_LARGE = "TEAM_MESSAGE_TOO_LARGE"
    TEAM_MAILBOX_FULL = "TEAM_MAILBOX_FULL"
    PROMPT_QUEUE_FULL = "PROMPT_QUEUE_FULL"
    TEAM_ROSTER_FULL = "TEAM_ROSTER_FULL"
    TEAM_TASK_BOARD_FULL = "TEAM_TASK_BOARD_FULL"
    TEAM_NAME_TAKEN = "TEAM_NAME_TAKEN"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TASK_REVISION_CONFLICT = "TASK_REVISION_CONFLICT"
    TASK_INVALID_ACTION = "TASK_INVALID_ACTION"
    TASK_DEPENDENCY_CYCLE = "TASK_DEPENDENCY_CYCLE"
    TASK_HAS_DEPENDANTS = "TASK_HAS_DEPENDANTS"
    TOO_MANY_WAITS = "TOO_MANY_WAITS"
    TOO_MANY_ENTRIES = "TOO_MANY_ENTRIES"
    HISTORY_ENTRY_TOO_LARGE = "HISTORY_ENTRY_TOO_LARGE"
    HISTORY_QUOTA_EXCEEDED = "HISTORY_QUOTA_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"
    IDEMPOTENCY_KEY_CONFLICT = "IDEMPOTENCY_KEY_CONFLICT"
    MESSAGE_ALREADY_DELIVERED = "MESSAGE_ALREADY_DELIVERED"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    # ask_human (mailbox/members/asks.py): an ask already answered or expired (the first answer won);
    # a decision that is not one of the ask's options; too many asks of one member waiting.
    ASK_NOT_PENDING = "ASK_NOT_PENDING"
    ASK_INVALID_DECISION = "ASK_INVALID_DECISION"
    TOO_MANY_ASKS = "TOO_MANY_ASKS"
    # Never raised as a refusal: why a message or prompt waits (the team's token budget is
    # used up: mailbox/members/usage.py), in a send's delivery observation, a message's last_error
    # and the dashboard.
    TEAM_BUDGET_EXHAUSTED = "TEAM_BUDGET_EXHAUSTED"
    # Never raised as a refusal: what a transport answers when the server itself failed.
    SERVER_ERROR = "SERVER_ERROR"
    # Never raised as a refusal: the database (or Redis) is out of reach just now (mailbox/plumbing/outage.py).
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.LEAD_ONLY: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.TASK_NOT_FOUND: 404,
    ErrorCode.TEAM_UNKNOWN_TARGET: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.TEAM_TARGET_RETIRED: 409,
    ErrorCode.TEAM_TARGET_FAILED: 409,
    ErrorCode.TEAM_ROSTER_FULL: 409,
    ErrorCode.TEAM_TASK_BOARD_FULL: 409,
    ErrorCode.TEAM_NAME_TAKEN: 409,
    ErrorCode.TASK_REVISION_CONFLICT: 409,
    ErrorCode.TASK_INVALID_ACTION: 409,
    ErrorCode.TASK_DEPENDENCY_CYCLE: 409,
    ErrorCode.TASK_HAS_DEPENDANTS: 409,
    ErrorCode.IDEMPOTENCY_KEY_CONFLICT: 409,
    ErrorCode.MESSAGE_ALREADY_DELIVERED: 409,
    ErrorCode.ASK_NOT_PENDING: 409,
    ErrorCode.ASK_INVALID_DECISION: 400,
    ErrorCode.TOO_MANY_ASKS: 429,
    ErrorCode.TEAM_MESSAGE_TOO_LARGE: 413,
    ErrorCode.TEAM_MAILBOX_FULL: 429,
    ErrorCode.PROMPT_QUEUE_FULL: 429,
    ErrorCode.TOO_MANY_WAITS: 429,
    ErrorCode.TOO_MANY_ENTRIES: 413,
    ErrorCode.HISTORY_ENTRY_TOO_LARGE: 413,
    ErrorCode.HISTORY_QUOTA_EXCEEDED: 429,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.TOO_MANY_CONNECTIONS: 429,
    ErrorCode.SERVER_ERROR: 500,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
}


class TeamError(Exception):
    """A refusal with a stable code; never a server fault."""

    def __init__(self, code: ErrorCode, message: str, **extra):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.extra = extra

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 400)

    def as_wire(self) -> dict:
        body: dict = {"error": {"code": str(self.code), "message": self.message}}
        body.update(self.extra)
        return body
