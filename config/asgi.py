"""ASGI entry point: HTTP goes to Django (/mcp to the MCP endpoint, /a2a to the A2A agents), websockets to the Channels consumers."""
import asyncio
import importlib
import os
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from asgiref.sync import ThreadSensitiveContext  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402
from mailbox.api import tool_calls  # noqa: E402
from teams.errors import TeamError  # noqa: E402


class Deferred:
    """An ASGI app imported at its first request instead of at boot, on a worker thread
    (the event loop serves everything else meanwhile); requests that come while it
    loads wait for the one import. The MCP and A2A SDKs take more than a second of
    CPU to import, about half of what starting a process cost, whether or not the
    process ever served /mcp or /a2a. A failed import is tried again by the next request."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name
        self._app = None
        self._loading: asyncio.Future | None = None

    async def __call__(self, scope, receive, send):
        app = self._app or await self._load()
        await app(scope, receive, send)

    async def _load(self):
        if self._loading is None:
            self._loading = asyncio.ensure_future(asyncio.to_thread(importlib.import_module, self.module))
        try:
            module = await asyncio.shield(self._loading)
        except BaseException:
            if self._loading.done():
                self._loading = None
            raise
        self._app = getattr(module, self.name)
        return self._app


mcp_app = Deferred("mailbox.mcp_server", "mcp_app")  # the Team tools' MCP endpoint
a2a_app = Deferred("delegation.server", "a2a_app")  # every member as an A2A agent


class RequestThreads:
    """Django runs each request's synchronous parts (middleware, sync views) on a
    thread of the request's own: by default a new thread per request, plus another
    that joins it afterwards. Under load, starting those threads was most of the
    event loop's work. Here a request borrows an idle single-thread executor
    instead, and gives it back when it is done; at most ``keep`` wait idle."""

    def __init__(self, app, keep: int = 32):
        self.app = app
        self.keep = keep
        self.idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope, receive, send):
        executor = self.idle.pop() if self.idle else ThreadPoolExecutor(1, thread_name_prefix="steerboard-request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            if len(self.idle) < self.keep:
                self.idle.append(executor)
            else:
                executor.shutdown(wait=False)


class AgentApiHandler(ASGIHandler):
    """Django's handler for the agents' bearer-token endpoints (the tools, the inbox,
    the session history), without the browser's middleware chain.

    Those are async views that use no cookie, session, CSRF token or message; the
    chain would run every middleware's hooks on a worker thread, about ten thread
    hops per request, the larger part of a ``send_message``'s cost on the event
    loop (docs/performance.md). What the chain gives these responses is kept: the
    Host check (ALLOWED_HOSTS) and the security headers."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._headers = [SecurityMiddleware(self._get_response_async), XFrameOptionsMiddleware(self._get_response_async)]
        self._middleware_chain = convert_exception_to_response(self._respond)

    async def _respond(self, request):
        request.get_host()  # DisallowedHost answers 400, as CommonMiddleware would
        response = await self._get_response_async(request)
        for middleware in self._headers:
            response = middleware.process_response(request, response)
        return response


AGENT_API_PREFIXES = ("/api/v1/tools", "/api/v1/inbox", "/api/v1/session/")
django_app = RequestThreads(django_asgi_app)
agent_api_app = RequestThreads(AgentApiHandler())
# Paths whose every request with a body must carry a member's bearer token.
MEMBER_BODY_PREFIXES = (*AGENT_API_PREFIXES, "/mcp")
# Paths where a request with a bearer token takes one from that token's bucket: the
# agents' API, /mcp, and the operator REST a member token may read (its own team).
RATE_LIMITED_PREFIXES = ("/api/", "/mcp")


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


async def _refuse(send, status: int, body: dict, *extra: tuple[bytes, bytes]) -> None:
    # The body is not read: the connection is not reused for another request.
    await tool_calls.respond_json(send, status, body, [*extra, (b"connection", b"close")])


def body_limits(app):
    """Refuse a request on its headers, before the application reads its body
    (docs/deployment.md, "Slow and huge clients"): a body for the agents' API or /mcp
    without a valid member token answers 401 ``UNAUTHENTICATED`` (the token lookup is
    the cached one, mailbox/auth.py); a ``Content-Length`` over DATA_UPLOAD_MAX_MEMORY_SIZE
    answers 413 ``TEAM_MESSAGE_TOO_LARGE`` (as the endpoints answer a body that turns out
    larger); a malformed ``Content-Length`` answers 400 ``VALIDATION_ERROR``."""
    from mailbox import auth, outage
    from mailbox.api.errors import bearer_challenge, too_large_body
    from mailbox.auth import member_of_request

    async def limited(scope, receive, send):
        length = _header(scope, b"content-length")
        size = 0
        if length is not None:
            try:
                size = int(length)
                if size < 0:
                    raise ValueError
            except ValueError:
                await _refuse(send, 400, {"error": {"code": "VALIDATION_ERROR", "message": "Content-Length is not a number."}})
                return
        path = scope.get("path", "")
        has_body = size > 0 or _header(scope, b"transfer-encoding") is not None
        if has_body and path.startswith(MEMBER_BODY_PREFIXES):
            try:
                member = await member_of_request(scope.get("headers", ()))
            except Exception as exc:  # the token's lookup needs the database: out of reach is a 503, not a bug
                what = outage.noted(exc, "a token lookup")
                if what is None:
                    raise
                retry = (b"retry-after", str(outage.RETRY_AFTER).encode())
                await _refuse(send, 503, outage.unavailable_body(what), retry)
                return
            # The endpoint takes it from here instead of looking the token up again.
            scope["steerboard.member"] = member
            if member is None:
                body = {"error": {"code": "UNAUTHENTICATED", "message": auth.MEMBER_TOKEN_MISSING}}
                await _refuse(send, 401, body, bearer_challenge(scope.get("headers", ())))
                return
        if size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            if path == "/api/v1/tools/send_message":  # as the tool answers it: nothing was stored
                body = {"error": {"code": "TEAM_MESSAGE_TOO_LARGE", "message": "The request body is too large."}, "persisted": False}
            else:
                body = too_large_body()
            await _refuse(send, 413, body)
            return
        await app(scope, receive, send)

    return limited


async def _rate_limited(scope, send, path: str) -> bool:
    """Each bearer token's request rate on the REST API and /mcp (mailbox/quota.py):
    past it 429 ``RATE_LIMITED`` with the limit and Retry-After, before the body is read.
    A request without a token goes on (the endpoint answers it)."""
    from mailbox import quota
    from mailbox.auth import bearer_from_headers
    from teams.tokens import token_hash

    token = bearer_from_headers(scope.get("headers", ()))
    if not token:
        return False
    try:
        quota.request_charge(token_hash(token))
    except TeamError as exc:
        if path == "/api/v1/tools/send_message":
            exc.extra["persisted"] = False
        retry = (b"retry-after", quota.retry_after_header(exc.extra["retry_after"]).encode())
        await _refuse(send, exc.http_status, exc.as_wire(), retry)
        return True
    return False


async def http_app(scope, receive, send):
    """A tool call is a plain ASGI app (mailbox/api/tool_calls.py); /mcp is the Team
    tools' MCP endpoint (mailbox/mcp_server.py); the agents' other bearer-token
    endpoints skip the browser middleware; every other path is Django's."""
    path = scope.get("path", "")
    if path.startswith(RATE_LIMITED_PREFIXES) and await _rate_limited(scope, send, path):
        return
    if tool_calls.handles(scope):  # the agents' tool calls: no Django request cycle at all
        return await tool_calls.app(scope, receive, send)
    if path == "/mcp" or path.startswith("/mcp/"):
        return await mcp_app(scope, receive, send)
    if path.startswith("/a2a/"):  # every member as an A2A agent (delegation/server.py)
        return await a2a_app(scope, receive, send)
    if path.startswith(AGENT_API_PREFIXES):
        return await agent_api_app(scope, receive, send)
    return await django_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": body_limits(http_app),
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
