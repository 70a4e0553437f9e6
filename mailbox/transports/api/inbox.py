"""REST for sessions without a websocket, and the team policy.

- ``GET /api/v1/inbox?after_seq=&limit=``: the caller's messages in seq order.
- ``POST /api/v1/session/entries``: history entries, folded exactly as the
  websocket's ``entry`` frames are (mailbox/members/inbox.py), so a polling
  session gets the same delivered guarantee as a connected one.
- ``GET /api/v1/tools/policy``: the team policy for members' instructions.
"""

from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from mailbox.plumbing.db import to_db_thread
from mailbox.members import inbox as inbox_service
from mailbox.transports import edge, policy
from mailbox.plumbing import quota, wire
from mailbox.transports.api.errors import error_json
from mailbox.transports.api.tools import _member, _method, tool_invoke
from teams.errors import ErrorCode, TeamError

def _whole(request, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"{name} is a whole number.")


@csrf_exempt  # bearer tokens, never cookies: a wrong method gets its error code, not a CSRF page
async def inbox(request):
    """GET /api/v1/inbox?after_seq=&limit= : the caller's messages after a cursor, oldest first."""
    try:
        _method(request, "GET")
        member = await _member(request)
        after_seq = _whole(request, "after_seq", 0)
        limit = _whole(request, "limit", 50)
        if not 1 <= limit <= 100 or not 0 <= after_seq <= wire.INT_MAX:
            raise TeamError(ErrorCode.VALIDATION_ERROR, "limit is 1-100 and after_seq is 0 to 2^63-1.")
        page = await to_db_thread(inbox_service.inbox_read)(member=member, after_seq=after_seq, limit=limit)
    except TeamError as exc:
        return error_json(exc)
    return JsonResponse(page)


@csrf_exempt
async def session_entries(request):
    """POST /api/v1/session/entries {"entries": [entry, ...]} (or {"entry": entry}) -> {"acks": [...]}."""
    try:
        _method(request, "POST")
        member = await _member(request)
        try:
            body = wire.json_loads(request.body or b"{}")
        except RequestDataTooBig:
            raise edge.too_large()
        except ValueError:  # UnicodeDecodeError is one; a refused value is a TeamError naming its field
            raise TeamError(ErrorCode.VALIDATION_ERROR, "The body is not valid JSON.")
        if not isinstance(body, dict) or set(body) not in ({"entries"}, {"entry"}):
            raise TeamError(
                ErrorCode.VALIDATION_ERROR, 'Send {"entries": [entry, ...]} or {"entry": entry}, entries as on the websocket.'
            )
        entries = inbox_service.entries_parse(body["entries"] if "entries" in body else [body["entry"]])
        acks = await inbox_service.entries_ack(member=member, entries=entries)
    except TeamError as exc:
        response = error_json(exc)
        if "retry_after" in exc.extra:
            response["Retry-After"] = quota.retry_after_header(exc.extra["retry_after"])
        return response
    return JsonResponse({"acks": acks})


@csrf_exempt
async def tools_policy(request):
    """GET /api/v1/tools/policy. Any other method is a tool call to a tool named 'policy', as before."""
    if request.method != "GET":
        return await tool_invoke(request, "policy")
    return JsonResponse(policy.policy_out())
