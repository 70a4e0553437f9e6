"""Every refusal on the wire is ``{"error": {"code", "message"}}`` with a 4xx status."""
import logging
import sys

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from mailbox import outage
from teams.errors import ErrorCode, TeamError

log = logging.getLogger(__name__)

_DRF_CODES = [
    (drf.NotAuthenticated, ErrorCode.UNAUTHENTICATED),
    (drf.AuthenticationFailed, ErrorCode.UNAUTHENTICATED),
    (drf.PermissionDenied, ErrorCode.FORBIDDEN),
    (drf.NotFound, ErrorCode.NOT_FOUND),
    (drf.MethodNotAllowed, ErrorCode.METHOD_NOT_ALLOWED),
    (drf.ValidationError, ErrorCode.VALIDATION_ERROR),
    (drf.ParseError, ErrorCode.VALIDATION_ERROR),
    (drf.UnsupportedMediaType, ErrorCode.VALIDATION_ERROR),
]


def too_large_body() -> dict:
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE, on every endpoint that reads one."""
    from django.conf import settings

    return {"error": {"code": str(ErrorCode.TEAM_MESSAGE_TOO_LARGE),
                      "message": f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."}}


def bearer_challenge(headers) -> tuple[bytes, bytes]:
    """The ``WWW-Authenticate`` header of a 401 for a member's bearer token (RFC 6750, section 3):
    ``error="invalid_token"`` when a token was sent, no error code when none was. The tokens are
    static (manage.py member_token), not OAuth: the challenge names no ``resource_metadata`` and no
    OAuth metadata is published (/.well-known/oauth-* answer 404), so an MCP client that follows
    the authorization spec finds no authorization server and reports the 401 (docs/mcp.md)."""
    from mailbox.auth import bearer_from_headers

    value = 'Bearer realm="steerboard"'
    if bearer_from_headers(headers):
        value += ', error="invalid_token", error_description="The bearer token is not a valid member token."'
    return (b"www-authenticate", value.encode())


def error_json(exc: TeamError) -> JsonResponse:
    return JsonResponse(exc.as_wire(), status=exc.http_status)


def exception_handler(exc, context):
    """DRF's exception handler, speaking Steerboard's error shape."""
    from django.http import Http404

    if isinstance(exc, TeamError):
        return Response(exc.as_wire(), status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):  # Django's would be its HTML 400 page
        return Response(too_large_body(), status=413)
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return Response({"error": {"code": "VALIDATION_ERROR", "message": str(exc)}}, status=400)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    for klass, code in _DRF_CODES:
        if isinstance(exc, klass):
            detail = exc.detail
            if isinstance(detail, dict | list):
                message = _flatten(detail)
            else:
                message = str(detail)
            headers = {}
            if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
                headers["WWW-Authenticate"] = 'Bearer realm="steerboard"'
            status = 401 if code == ErrorCode.UNAUTHENTICATED else exc.status_code
            return Response({"error": {"code": str(code), "message": message}}, status=status, headers=headers)
    if isinstance(exc, drf.APIException):
        return Response({"error": {"code": "ERROR", "message": str(exc.detail)}}, status=exc.status_code)
    what = outage.noted(exc, "a request")
    if what is not None:  # the database (or Redis) is out of reach: a 503, not a bug
        return Response(outage.unavailable_body(what), status=503, headers=outage.unavailable_headers())
    return None


def _flatten(detail) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(_flatten(v) for v in detail)
    return str(detail)


def not_found(request, exception=None):
    return JsonResponse({"error": {"code": "NOT_FOUND", "message": "No such endpoint."}}, status=404)


def server_error(request):
    what = outage.noted(sys.exc_info()[1], "a request")
    if what is not None:  # Django calls this inside its except block: the database (or Redis) is out of reach
        return JsonResponse(outage.unavailable_body(what), status=503, headers=outage.unavailable_headers())
    return JsonResponse({"error": {"code": "SERVER_ERROR", "message": "The server failed; this is a bug."}}, status=500)
