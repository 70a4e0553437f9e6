"""GET /api/v1/protocol/frames.json: the websocket frames' JSON Schema (docs/protocol.md).

Generated once per process from the pydantic models in mailbox/plumbing/wire.py; public
(no token: it describes the protocol, not any team) and cacheable, with an ETag
so a client that has it gets a 304.
"""
import functools
import hashlib
import json

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import condition

from mailbox.plumbing import wire
from mailbox.transports.api.errors import error_json
from teams.errors import ErrorCode, TeamError

CACHE_CONTROL = "public, max-age=3600"


@functools.cache
def _document() -> tuple[bytes, str]:
    body = json.dumps(wire.frame_schemas(), indent=2, sort_keys=False).encode()
    return body, hashlib.sha256(body).hexdigest()[:32]


@csrf_exempt  # it changes nothing: any other method answers the JSON 405
def frames(request):
    if request.method not in ("GET", "HEAD"):
        return error_json(TeamError(ErrorCode.METHOD_NOT_ALLOWED, "Use GET."))
    return _frames(request)


@condition(etag_func=lambda request: _document()[1])
def _frames(request):
    response = HttpResponse(_document()[0], content_type="application/schema+json")
    response["Cache-Control"] = CACHE_CONTROL
    return response
