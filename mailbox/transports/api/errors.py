"""Every refusal on the wire is ``{"error": {"code", "message"}}`` with a 4xx status: a
``TeamError`` (teams/errors.py) as Django's and DRF's responses."""
import logging
import sys

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from mailbox.plumbing import outage
from mailbox.transports import edge
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


def error_json(exc: TeamError, **headers) -> JsonResponse:
    """A refusal as Django's JSON response: its status, its body, and ``headers``."""
    return JsonResponse(exc.as_wire(), status=exc.http_status, headers=headers or None)


def _drf(exc: TeamError, *, status: int | None = None, headers=None) -> Response:
    return Response(exc.as_wire(), status=status or exc.http_status, headers=headers)


def exception_handler(exc, context):
    """DRF's exception handler, speaking Steerboard's error shape."""
    from django.http import Http404

    if isinstance(exc, TeamError):
        return _drf(exc)
    if isinstance(exc, RequestDataTooBig):  # Django's would be its HTML 400 page
        return _drf(edge.too_large())
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return _drf(TeamError(ErrorCode.VALIDATION_ERROR, str(exc)))
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
            return _drf(TeamError(code, message), status=status, headers=headers)
    if isinstance(exc, drf.APIException):  # none the API raises today (no throttling, no content negotiation)
        return _drf(TeamError(ErrorCode.VALIDATION_ERROR, str(exc.detail)), status=exc.status_code)
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
    return error_json(TeamError(ErrorCode.NOT_FOUND, "No such endpoint."))


def server_error(request):
    what = outage.noted(sys.exc_info()[1], "a request")
    if what is not None:  # Django calls this inside its except block: the database (or Redis) is out of reach
        return JsonResponse(outage.unavailable_body(what), status=503, headers=outage.unavailable_headers())
    return error_json(TeamError(ErrorCode.SERVER_ERROR, "The server failed; this is a bug."))
