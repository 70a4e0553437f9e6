"""``GET /api/v1/teams/<team>/export[?since=ISO]``: the team's NDJSON export (mailbox/operations/archive.py)
streamed to an operator (``Authorization: Token <operator token>`` or a signed-in operator's
session), a page of rows at a time. Thin: who asks, which team, then the stream, each page read
on a database thread."""
from django.http import JsonResponse, StreamingHttpResponse
from django.utils.dateparse import parse_datetime

from accounts.operators import is_operator
from accounts.tokens import operator_token_user
from mailbox.plumbing.db import to_db_thread
from mailbox.operations import archive
from mailbox.transports.api.errors import error_json
from teams import selectors as team_selectors
from teams.errors import ErrorCode, TeamError

LINES_PER_CHUNK = archive.PAGE


def _refusal(code: ErrorCode, message: str, **headers) -> JsonResponse:
    return error_json(TeamError(code, message), **headers)


def _token_user(header: str):
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "token" or not token.strip():
        return None
    try:
        return operator_token_user(token=token.strip())
    except UnicodeEncodeError:  # a lone surrogate is no token
        return None


def _chunk(lines) -> str | None:
    """The stream's next lines (one page of rows at most), or None at its end."""
    out = []
    for line in lines:
        out.append(line)
        if len(out) >= LINES_PER_CHUNK:
            break
    return "".join(out) or None


async def team_export(request, team):
    if request.method != "GET":
        return _refusal(ErrorCode.METHOD_NOT_ALLOWED, "GET only.")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    user = await to_db_thread(_token_user)(header) if header else await request.auser()
    if user is None or not user.is_authenticated:
        return _refusal(ErrorCode.UNAUTHENTICATED, "An operator's token (Authorization: Token <token>) or "
                        "a signed-in operator's session.", **{"WWW-Authenticate": 'Token realm="steerboard"'})
    if not await to_db_thread(is_operator)(user):
        return _refusal(ErrorCode.FORBIDDEN, "Only operators may export a team.")
    found = await to_db_thread(team_selectors.team_by_name)(name=team)
    if found is None:
        return _refusal(ErrorCode.NOT_FOUND, f"No team {team!r}.")
    since = request.GET.get("since")
    since_at = parse_datetime(since) if since else None
    if since and (since_at is None or since_at.tzinfo is None):
        return _refusal(ErrorCode.VALIDATION_ERROR, f"since={since!r} is not an ISO 8601 time with a zone.")
    lines = archive.export_lines(team=found, since=since_at)

    async def stream():
        while (chunk := await to_db_thread(_chunk)(lines)) is not None:
            yield chunk

    return StreamingHttpResponse(
        stream(), content_type="application/x-ndjson; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{found.name}.ndjson"'},
    )
