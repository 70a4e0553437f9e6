"""The ten Team tools over REST, and a member's own history (for cold-resume).

Plain async Django views: ``wait_agent`` may wait for an hour, and must not
hold a worker thread while it does.
"""
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from mailbox.plumbing.db import to_db_thread
from mailbox.engine import history
from mailbox.transports import edge, tools
from mailbox.plumbing import wire
from mailbox.transports.api.errors import error_json
from mailbox.transports.tools import TOOLS, tool_call
from teams.errors import ErrorCode, TeamError


def _headers(request):
    return [(k.lower(), v) for k, v in request.headers.items()]


def _scope(request) -> dict:
    """The request's ASGI scope, where the edge left its member (mailbox/transports/edge.py); for a
    request that did not come over ASGI (a test's Django client), its headers in that shape."""
    scope = getattr(request, "scope", None)
    return scope if scope is not None else {"headers": _headers(request)}


async def _member(request):
    return await edge.member_required(_scope(request))


async def tool_request(*, name: str, scope, body: bytes | None) -> dict:
    """One tool call over REST from its raw parts (``scope``: the request's, with the member
    the edge found; ``body`` None: over the upload limit); raises TeamError for every refusal,
    with the tool's refusal extras. Django's view below and the plain ASGI app that serves
    POST (mailbox/transports/api/tool_calls.py) both answer with it."""
    try:
        member = await edge.member_required(scope)
        if body is None:
            raise edge.too_large(tool_call=True)
        try:
            arguments = wire.json_loads(body or b"{}")
        except ValueError:  # UnicodeDecodeError is one; nesting, NUL and the like are TeamErrors naming the field
            raise TeamError(ErrorCode.VALIDATION_ERROR, "The body is not valid JSON.")
    except TeamError as exc:
        raise tools.refused(name, exc)
    headers = scope.get("headers", ())
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
    try:
        _method(request, "POST")
        try:
            body = request.body
        except RequestDataTooBig:
            body = None
        result = await tool_request(name=name, scope=_scope(request), body=body)
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
