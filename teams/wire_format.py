"""How values are written on the wire, the same for REST, MCP, websockets and the dashboard:
timestamps as ISO 8601 in UTC with a ``Z``, page cursors as opaque URL-safe text."""
import base64
from datetime import datetime

from teams.errors import ErrorCode, TeamError


def iso(value: datetime | None) -> str | None:
    """``2026-12-01T15:51:06.123456Z`` (None stays None)."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def cursor_encode(position: str) -> str:
    """An opaque keyset cursor for a page's last position (selectors choose what the position holds)."""
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> str:
    """The position a cursor of ours holds; anything else is the client's 400."""
    try:
        return base64.urlsafe_b64decode(cursor.encode() + b"==").decode()
    except (ValueError, UnicodeDecodeError):
        raise cursor_refused()


def cursor_refused() -> TeamError:
    return TeamError(ErrorCode.VALIDATION_ERROR, "That cursor is not one this server handed out.")
