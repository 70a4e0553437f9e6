"""The edge: what every HTTP request and every websocket passes once, before any
transport sees it (``config/asgi.py`` wraps the whole application in ``http_edge``
and ``websocket_edge``). In order, each step on the request's headers alone,
before a body is read:

1. **Host**: one ``ALLOWED_HOSTS`` admits (Django's own check; the hosts it
   admitted are remembered). Else 400 ``VALIDATION_ERROR`` on every surface: the
   agents' API, the operator REST, the dashboard's pages, ``/mcp``, ``/a2a``; a
   websocket is accepted only to say so in an ``error`` frame, then closed
   ``4400``.
2. **size**: a ``Content-Length`` over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers
   413 ``TEAM_MESSAGE_TOO_LARGE`` (as the endpoints answer a body that turns out
   larger); one that is not a number, 400 ``VALIDATION_ERROR``
   (docs/deployment.md, "Slow and huge clients").
3. **member**: on the agents' paths (``MEMBER_PREFIXES``: the tools, the inbox,
   the session endpoints, ``/mcp``; and ``/ws/agent/``) the member the bearer
   token names, looked up once (the cached lookup, mailbox/plumbing/auth.py) and put in
   the scope under ``MEMBER_KEY``: the transports read it there
   (``member_required``), none looks the token up again. A body on those paths
   without a valid member token answers 401 ``UNAUTHENTICATED`` before it is
   read; an agent websocket without one is refused at its handshake (HTTP 403).
   A database out of reach answers 503 ``SERVICE_UNAVAILABLE`` (a websocket:
   its error frame, then ``4503``).
4. **rate**: a request with a bearer token to the REST API, ``/mcp`` or
   ``/a2a`` takes one from that token's bucket (mailbox/plumbing/quota.py); past it 429
   ``RATE_LIMITED`` with ``Retry-After``. The bucket's key is in the scope
   (``RATE_KEY``) for a request that costs more than one (A2A's ListTasks). The
   agent websocket's tool frames are charged one each by the consumer.
5. **process start**: this process's sweeper (mailbox/operations/sweeper.py) runs from the
   first request that got through (daphne has no startup hook), but for the
   probes (``PROBES``: a health check or a scrape observes the process, it does
   not set it to work).

Every refusal is a ``TeamError`` with an ``ErrorCode`` (teams/errors.py),
answered by ``refuse``: over HTTP as JSON with the headers Django's middleware
would add (``respond_json``), on a websocket as an ``error`` frame before the
close. A refused tool call carries the extras its tool declares for its
refusals (``persisted: false`` for ``send_message``), whichever step refused it
(``tools.refused``).
"""
import json
import logging

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, JsonResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from mailbox.plumbing import outage
from mailbox.operations import sweeper
from mailbox.plumbing import auth, quota
from mailbox.transports import tools
from teams.errors import ErrorCode, TeamError
from teams.tokens import token_hash

security_log = logging.getLogger("django.security.DisallowedHost")

# What the edge leaves in the scope for the transports.
MEMBER_KEY = "steerboard.member"  # the member the bearer token names (None: no valid member token)
RATE_KEY = "steerboard.rate_key"  # the token's request bucket (None: no bearer token)

TOOL_PREFIX = "/api/v1/tools/"
# Paths whose requests speak for a member: a body on them needs a member token.
MEMBER_PREFIXES = ("/api/v1/tools", "/api/v1/inbox", "/api/v1/session/", "/mcp")
# The public reads among them: the tools' schemas and the team policy.
PUBLIC_READS = ("/api/v1/tools", "/api/v1/tools/policy")
MEMBER_SOCKET = "/ws/agent/"
# Paths where a request with a bearer token takes one from that token's bucket: the
# agents' API, the operator REST a member token may read (its own team), /mcp and /a2a.
RATE_LIMITED_PREFIXES = ("/api/", "/mcp", "/a2a/")
# What load balancers and scrapers ask (docs/deployment.md, docs/operations.md): they start nothing.
PROBES = ("/healthz", "/readyz", "/metrics")

# Websocket close codes of the edge (docs/protocol.md, "Close codes").
CLOSE_BAD_REQUEST = 4400  # after a VALIDATION_ERROR error frame: the Host is not allowed
CLOSE_UNAVAILABLE = 4503  # after a SERVICE_UNAVAILABLE error frame: the database is out of reach

_allowed_hosts: set[tuple[bytes, bytes | None]] = set()
_header_cache: list[tuple[bytes, bytes]] | None = None


# --- the refusals' words: one each, whichever surface answers -----------------------------------
def host_refused() -> TeamError:
    return TeamError(
        ErrorCode.VALIDATION_ERROR, "That Host is not one this server answers to (the server's ALLOWED_HOSTS)."
    )


def length_refused() -> TeamError:
    return TeamError(ErrorCode.VALIDATION_ERROR, "Content-Length is not a number.")


def too_large(*, tool_call: bool = False) -> TeamError:
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE, on every endpoint that reads one (a tool call's
    in the words the tool calls have always answered it with)."""
    if tool_call:
        return TeamError(ErrorCode.TEAM_MESSAGE_TOO_LARGE, "The request body is too large.")
    return TeamError(
        ErrorCode.TEAM_MESSAGE_TOO_LARGE,
        f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
    )


def unauthenticated() -> TeamError:
    return TeamError(ErrorCode.UNAUTHENTICATED, auth.MEMBER_TOKEN_MISSING)


def bearer_challenge(headers) -> tuple[bytes, bytes]:
    """The ``WWW-Authenticate`` header of a 401 for a member's bearer token (RFC 6750, section 3):
    ``error="invalid_token"`` when a token was sent, no error code when none was. The tokens are
    static (manage.py member_token), not OAuth: the challenge names no ``resource_metadata`` and no
    OAuth metadata is published (/.well-known/oauth-* answer 404), so an MCP client that follows
    the authorization spec finds no authorization server and reports the 401 (docs/mcp.md)."""
    value = 'Bearer realm="steerboard"'
    if auth.bearer_from_headers(headers):
        value += ', error="invalid_token", error_description="The bearer token is not a valid member token."'
    return (b"www-authenticate", value.encode())


def retry_after(exc: TeamError) -> tuple[bytes, bytes]:
    """The ``Retry-After`` header of a rate or quota 429 (its ``retry_after``, whole seconds)."""
    return (b"retry-after", quota.retry_after_header(exc.extra["retry_after"]).encode())


def unavailable_headers() -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in outage.unavailable_headers().items()]


# --- the checks ----------------------------------------------------------------------------------
def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


def host_allowed(scope) -> bool:
    """Whether the request's Host is one ALLOWED_HOSTS admits: Django's own check (which reads
    X-Forwarded-Host instead when USE_X_FORWARDED_HOST says so), remembered for the hosts it
    admitted (at most 64) so that the hot path pays a set lookup."""
    host, forwarded = _header(scope, b"host") or b"", _header(scope, b"x-forwarded-host")
    if (host, forwarded) in _allowed_hosts:
        return True
    request = HttpRequest()
    server = scope.get("server") or ("localhost", 80)
    request.META = {"SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1] or 80)}
    if host:
        request.META["HTTP_HOST"] = host.decode("latin-1")
    if forwarded is not None:
        request.META["HTTP_X_FORWARDED_HOST"] = forwarded.decode("latin-1")
    try:
        request.get_host()
    except DisallowedHost as exc:
        security_log.warning(str(exc))  # the line Django logs for it (without the traceback)
        return False
    if len(_allowed_hosts) < 64:
        _allowed_hosts.add((host, forwarded))
    return True


def tool_of(scope) -> str | None:
    """The tool a request calls: POST /api/v1/tools/<name> (GET /api/v1/tools/policy and the rest are not calls)."""
    if scope.get("method") != "POST":
        return None
    path = scope.get("path", "")
    name = path[len(TOOL_PREFIX):]
    return name if path.startswith(TOOL_PREFIX) and name and "/" not in name else None


def _speaks_for_a_member(scope, path: str) -> bool:
    if scope["type"] == "websocket":
        return path == MEMBER_SOCKET
    return path.startswith(MEMBER_PREFIXES) and not (scope.get("method") == "GET" and path in PUBLIC_READS)


async def member_required(scope):
    """The member the request's bearer token names, or 401 ``UNAUTHENTICATED``: the one the
    edge found (``MEMBER_KEY``); looked up here only for a request that did not pass the edge
    (a test's Django client, or an app called by itself)."""
    if MEMBER_KEY in scope:
        member = scope[MEMBER_KEY]
    else:
        member = await auth.member_of_request(scope.get("headers", ()))
    if member is None:
        raise unauthenticated()
    return member


# --- the answers ---------------------------------------------------------------------------------
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


async def respond_json(send, status: int, body, extra=()) -> None:
    """A JSON response straight over ASGI, with the headers Django's middleware would add
    (the edge, the tool app, /mcp and /a2a answer with it)."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers + _security_headers()})
    await send({"type": "http.response.body", "body": payload})


async def refuse(scope, receive, send, exc: TeamError, headers=(), *, close_code: int = CLOSE_BAD_REQUEST) -> None:
    """Answer a refusal: over HTTP its status and JSON body (with ``headers``; a refused tool
    call with its tool's refusal extras); on a websocket the handshake accepted only to send
    the ``error`` frame, then closed with ``close_code``."""
    tool = tool_of(scope)
    if tool:
        tools.refused(tool, exc)
    if scope["type"] == "websocket":
        await _socket_says(receive, send, {"type": "error", **exc.as_wire()}, close_code)
        return
    await respond_json(send, exc.http_status, exc.as_wire(), headers)


async def _socket_says(receive, send, frame: dict, close_code: int) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps(frame)})
    await send({"type": "websocket.close", "code": close_code})


async def _socket_denied(receive, send) -> None:
    """A handshake refused before it is accepted (the server answers HTTP 403): final to a client."""
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 4401})


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


# --- the edge itself -------------------------------------------------------------------------------
def http_edge(app):
    """The HTTP application behind the edge (module docstring). A refusal before the body is
    read closes the connection (the body is not read, so it cannot carry another request)."""

    async def edge(scope, receive, send):
        path = scope.get("path", "")
        close = [(b"connection", b"close")]
        if not host_allowed(scope):
            return await refuse(scope, receive, send, host_refused(), close)
        length = _header(scope, b"content-length")
        size = 0
        if length is not None:
            try:
                size = int(length)
                if size < 0:
                    raise ValueError
            except ValueError:
                return await refuse(scope, receive, send, length_refused(), close)
        if size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return await refuse(scope, receive, send, too_large(tool_call=tool_of(scope) is not None), close)
        token = auth.bearer_from_headers(scope.get("headers", ()))
        if _speaks_for_a_member(scope, path):
            has_body = size > 0 or _header(scope, b"transfer-encoding") is not None
            if token or has_body:
                if not await _member_found(scope, receive, send, close):
                    return
                if scope[MEMBER_KEY] is None and has_body:
                    challenge = bearer_challenge(scope.get("headers", ()))
                    return await refuse(scope, receive, send, unauthenticated(), [challenge, *close])
            else:
                scope[MEMBER_KEY] = None
        if path.startswith(RATE_LIMITED_PREFIXES):
            scope[RATE_KEY] = token_hash(token) if token else None
            if token:
                try:
                    quota.request_charge(scope[RATE_KEY])
                except TeamError as exc:
                    return await refuse(scope, receive, send, exc, [retry_after(exc), *close])
        if path not in PROBES:
            sweeper.ensure_started()
        await app(scope, receive, send)

    return edge


def websocket_edge(app):
    """The websocket application behind the edge: Host, the agent socket's member, process start."""

    async def edge(scope, receive, send):
        if not host_allowed(scope):
            return await refuse(scope, receive, send, host_refused(), close_code=CLOSE_BAD_REQUEST)
        if _speaks_for_a_member(scope, scope.get("path", "")):
            if not await _member_found(scope, receive, send):
                return
            if scope[MEMBER_KEY] is None:
                return await _socket_denied(receive, send)
        sweeper.ensure_started()
        await app(scope, receive, send)

    return edge


async def _member_found(scope, receive, send, headers=()) -> bool:
    """Put the token's member (or None) in the scope; False once a database out of reach is answered."""
    try:
        scope[MEMBER_KEY] = await auth.member_of_request(scope.get("headers", ()))
    except Exception as exc:  # the lookup needs the database: out of reach is a 503, not a bug
        what = outage.noted(exc, "a token lookup")
        if what is None:
            raise
        if scope["type"] == "websocket":
            await _socket_says(receive, send, outage.unavailable_frame(what), CLOSE_UNAVAILABLE)
        else:
            await respond_json(send, 503, outage.unavailable_body(what), [*unavailable_headers(), *headers])
        return False
    return True
