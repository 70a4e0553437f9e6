"""``POST /api/v1/tools/<name>`` as a plain ASGI app: the hot path of an agent's REST call.

The same tool call as ``tools.tool_invoke`` (``tools.tool_request``; that view
still answers every other method on the path), without Django's request cycle: no request object,
no ``request_started``/``request_finished`` signals run on a worker thread, no
URL resolver. What the cycle gave these responses is kept: the Host check
(ALLOWED_HOSTS, a 400 as Django answers it), the security headers that
SecurityMiddleware and XFrameOptionsMiddleware add, the upload size limit
(DATA_UPLOAD_MAX_MEMORY_SIZE) and the JSON error shape. A member token's
lookup is the cached one (mailbox/auth.py); only a miss goes to a database
thread.
"""
import json
import logging

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, JsonResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from mailbox import outage, sweeper
from mailbox.api.tools import tool_request
from teams.errors import TeamError

log = logging.getLogger(__name__)
PREFIX = "/api/v1/tools/"
_allowed_hosts: set[bytes] = set()
_header_cache: list[tuple[bytes, bytes]] | None = None


def handles(scope) -> bool:
    """A tool call: POST /api/v1/tools/<name> (GET /api/v1/tools/policy and the rest stay Django's)."""
    if scope.get("method") != "POST":
        return False
    path = scope.get("path", "")
    return path.startswith(PREFIX) and len(path) > len(PREFIX) and "/" not in path[len(PREFIX):]


def _security_headers() -> list[tuple[bytes, bytes]]:
    """The headers Django's middleware adds to a JSON response, worked out by that middleware once."""
    global _header_cache
    if _header_cache is None:
        request, response = HttpRequest(), JsonResponse({})
        request.META = {"SERVER_NAME": "localhost", "SERVER_PORT": "80"}
        for middleware in (SecurityMiddleware(lambda r: response), XFrameOptionsMiddleware(lambda r: response)):
            response = middleware.process_response(request, response)
        _header_cache = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in response.items()
            if k.lower() not in ("content-type", "content-length")
        ]
    return _header_cache


def host_allowed(scope) -> bool:
    """Whether the request's Host is one ALLOWED_HOSTS admits (Django's own check), for the
    ASGI apps that answer without Django's handler: the tool app, /mcp and /a2a."""
    host = b""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value
            break
    if host in _allowed_hosts:
        return True
    request = HttpRequest()
    server = scope.get("server") or ("localhost", 80)
    request.META = {"SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1] or 80)}
    if host:
        request.META["HTTP_HOST"] = host.decode("latin-1")
    try:
        request.get_host()
    except DisallowedHost:
        return False
    if len(_allowed_hosts) < 64:
        _allowed_hosts.add(host)
    return True


async def respond_json(send, status: int, body: dict, extra: list[tuple[bytes, bytes]] = ()) -> None:
    """A JSON response straight over ASGI, with the headers Django's middleware would add
    (the tool app, the header checks of config/asgi.py and /mcp answer with it)."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers + _security_headers()})
    await send({"type": "http.response.body", "body": payload})


async def body_read(receive, limit: int | None) -> bytes | None:
    """The request body, or None when it is larger than the limit."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def app(scope, receive, send) -> None:
    sweeper.ensure_started()
    if not host_allowed(scope):
        await respond_json(send, 400, {"error": {"code": "BAD_REQUEST", "message": "That Host is not allowed here."}})
        return
    name = scope["path"][len(PREFIX):]
    try:
        try:
            body = await body_read(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        except ConnectionResetError:
            return
        result = await tool_request(
            name=name, headers=scope.get("headers", ()), body=body, member=scope.get("steerboard.member")
        )
    except TeamError as exc:
        await respond_json(send, exc.http_status, exc.as_wire())
        return
    except Exception as exc:
        what = outage.noted(exc, "a tool call")
        if what is not None:  # the database (or Redis) is out of reach: not a bug; nothing was stored
            retry = [(k.lower().encode(), v.encode()) for k, v in outage.unavailable_headers().items()]
            await respond_json(send, 503, outage.unavailable_body(what), retry)
            return
        log.exception("tool call %s failed", name)
        await respond_json(send, 500, {"error": {"code": "SERVER_ERROR", "message": "The server failed; this is a bug."}})
        return
    await respond_json(send, 200, result)
