"""The ten Team tools over REST, and a member's own history (for cold-resume).

Plain async Django views: ``wait_agent`` may wait for an hour, and must not
hold a worker thread while it does.
"""
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from mailbox import auth, history, sweeper, wire
from mailbox.api.errors import error_json
from mailbox.auth import member_of_request
from mailbox.db import to_db_thread
from mailbox.tools import TOOLS, tool_call
from teams.errors import ErrorCode, TeamError


def _headers(request):
    return [(k.lower(), v) for k, v in request.headers.items()]


async def _member(request):
    return await _member_of(_headers(request))


async def _member_of(headers):
    member = await member_of_request(headers)
    if member is None:
        raise TeamError(ErrorCode.UNAUTHENTICATED, auth.MEMBER_TOKEN_MISSING)
    return member


async def tool_request(*, name: str, headers, body: bytes | None, member=None) -> dict:
    """One tool call over REST from its raw parts (``body`` None: over the upload
    limit; ``member``: the token's member when config/asgi.py already looked it up);
    raises TeamError for every refusal. Django's view below and the plain ASGI app
    that serves POST (mailbox/api/tool_calls.py) both answer with it."""
    extra = {"persisted": False} if name == "send_message" else {}
    member = member or await _member_of(headers)
    if body is None:
        raise TeamError(ErrorCode.TEAM_MESSAGE_TOO_LARGE, "The request body is too large.", **extra)
    try:
        arguments = wire.json_loads(body or b"{}")
    except TeamError as exc:  # nesting, NUL, a lone surrogate, a number out of range: refused here
        exc.extra.update(extra)
        raise
    except ValueError:  # UnicodeDecodeError is one
        raise TeamError(ErrorCode.VALIDATION_ERROR, "The body is not valid JSON.", **extra)
    return await tool_call(member=member, name=name, arguments=arguments, transport="rest", headers=headers)


def _method(request, allowed: str) -> None:
    if request.method != allowed:
        raise TeamError(ErrorCode.METHOD_NOT_ALLOWED, f"Use {allowed}.")


async def tools_list(request):
    try:
        _method(request, "GET")
    except TeamError as exc:
        return error_json(exc)
    return JsonResponse([tool.schema() for tool in TOOLS.values()], safe=False)


@csrf_exempt
async def tool_invoke(request, name: str):
    sweeper.ensure_started()
    try:
        _method(request, "POST")
        try:
            body = request.body
        except RequestDataTooBig:
            body = None
        result = await tool_request(name=name, headers=_headers(request), body=body)
    except TeamError as exc:
        return error_json(exc)
    return JsonResponse(result)


async def session_history(request):
    """GET /api/v1/session/history?after=&limit= : the caller's own history, oldest first."""
    try:
        _method(request, "GET")
        member = await _member(request)
        try:
            after = int(request.GET.get("after") or 0)
            limit = int(request.GET.get("limit") or 500)
        except ValueError:
            raise TeamError(ErrorCode.VALIDATION_ERROR, "after and limit are whole numbers.")
        if not 1 <= limit <= 1000 or not 0 <= after <= wire.INT_MAX:
            raise TeamError(ErrorCode.VALIDATION_ERROR, "limit is 1-1000 and after is 0 to 2^63-1.")
        entries, next_after = await to_db_thread(history.history_page)(
            member=member, after=after, limit=limit
        )
    except TeamError as exc:
        return error_json(exc)
    return JsonResponse({"member": member.name, "entries": entries, "next_after": next_after})
