"""ASGI entry point: every request and websocket passes the edge once (mailbox/transports/edge.py: Host,
size, member, rate, process start); then HTTP goes to Django (/mcp to the MCP endpoint, /a2a to
the A2A agents), websockets to the Channels consumers."""
import asyncio
import importlib
import os
from concurrent.futures import ThreadPoolExecutor

from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from config import websocket_frames

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()
websocket_frames.apply()  # daphne's per-frame work made cheap (config/websocket_frames.py)

from asgiref.sync import ThreadSensitiveContext  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402
from mailbox.transports import edge  # noqa: E402
from mailbox.transports.api import tool_calls  # noqa: E402


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


mcp_app = Deferred("mailbox.transports.mcp_server", "mcp_app")  # the Team tools' MCP endpoint
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
    security headers (the Host was checked at the edge, mailbox/transports/edge.py)."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._headers = [SecurityMiddleware(self._get_response_async), XFrameOptionsMiddleware(self._get_response_async)]
        self._middleware_chain = convert_exception_to_response(self._respond)

    async def _respond(self, request):
        response = await self._get_response_async(request)
        for middleware in self._headers:
            response = middleware.process_response(request, response)
        return response


AGENT_API_PREFIXES = ("/api/v1/tools", "/api/v1/inbox", "/api/v1/session/")
django_app = RequestThreads(django_asgi_app)
agent_api_app = RequestThreads(AgentApiHandler())


async def http_app(scope, receive, send):
    """Behind the edge: a tool call is a plain ASGI app (mailbox/transports/api/tool_calls.py); /mcp
    is the Team tools' MCP endpoint (mailbox/transports/mcp_server.py); the agents' other
    bearer-token endpoints skip the browser middleware; every other path is Django's."""
    path = scope.get("path", "")
    if tool_calls.handles(scope):  # the agents' tool calls: no Django request cycle at all
        return await tool_calls.app(scope, receive, send)
    if path == "/mcp" or path.startswith("/mcp/"):
        return await mcp_app(scope, receive, send)
    if path.startswith("/a2a/"):  # every member as an A2A agent (delegation/server.py)
        return await a2a_app(scope, receive, send)
    if path.startswith(AGENT_API_PREFIXES):
        return await agent_api_app(scope, receive, send)
    return await django_app(scope, receive, send)


# The edge, once for every request and websocket (mailbox/transports/edge.py): Host, size, member,
# rate, process start; the transports behind it read what it found from the scope.
application = ProtocolTypeRouter(
    {
        "http": edge.http_edge(http_app),
        "websocket": edge.websocket_edge(URLRouter(websocket_urlpatterns)),
    }
)
