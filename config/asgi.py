"""ASGI entry point: HTTP goes to Django (and /mcp to the MCP endpoint), websockets to the Channels consumers."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402
from mailbox.mcp_server import mcp_app  # noqa: E402


async def http_app(scope, receive, send):
    """/mcp is the Team tools' MCP endpoint (mailbox/mcp_server.py); every other path is Django's."""
    path = scope.get("path", "")
    if path == "/mcp" or path.startswith("/mcp/"):
        return await mcp_app(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
