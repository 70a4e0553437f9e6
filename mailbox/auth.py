"""Bearer-token authentication for agent sessions and hosts (REST and websockets)."""
from teams.models import Member, Team
from teams.selectors import member_by_token, team_by_host_token


def bearer_from_headers(headers) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or ''."""
    for name, value in headers:
        key = name.decode("latin-1").lower() if isinstance(name, bytes) else name.lower()
        if key == "authorization":
            raw = value.decode("latin-1") if isinstance(value, bytes) else value
            scheme, _, token = raw.strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


def member_from_headers(headers) -> Member | None:
    return member_by_token(token=bearer_from_headers(headers))


def host_team_from_headers(headers) -> Team | None:
    return team_by_host_token(token=bearer_from_headers(headers))
