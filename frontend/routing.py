"""The dashboard's websocket routes.

Browsers authenticate with the session cookie and always send Origin, so these
routes (and only these: /ws/agent/ and /ws/host/ use bearer tokens and no
Origin) are wrapped in a same-origin check and the session auth middleware.

The origin check compares the whole origin, scheme, host and port, as the
browser's own same-origin rule does: the ``Origin`` must be the socket's own
(``http://`` + its ``Host`` for ``ws://``, ``https://`` for ``wss://`` or a
request the proxy marks secure through ``SECURE_PROXY_SSL_HEADER``) with a
``Host`` in ``ALLOWED_HOSTS``, or one of ``CSRF_TRUSTED_ORIGINS`` (a dashboard
behind a proxy that rewrites ``Host``). Anything else is refused before the
handshake (HTTP 403).
"""
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path

from frontend.consumers import DashboardConsumer

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the default port filled in; None when it is not one."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or parts.query:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _secure(scope) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, expected = proxy
        wanted = header.lower().removeprefix("http_").replace("_", "-").encode()
        value = _header(scope, wanted)
        return value is not None and value.split(",")[0].strip() == expected
    return False


def origin_allowed(scope) -> bool:
    origin = _origin(_header(scope, b"origin") or "")
    if origin is None:
        return False
    trusted = [_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS if "*" not in o]
    if origin in trusted:
        return True
    host = _header(scope, b"host") or ""
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return origin == _origin(("https://" if _secure(scope) else "http://") + host)


class SameOriginValidator:
    """Refuses (HTTP 403) a dashboard socket whose Origin is not the socket's own origin."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


def _browser_only(app):
    return SameOriginValidator(AuthMiddlewareStack(app))


websocket_urlpatterns = [
    path("ws/dashboard/", _browser_only(DashboardConsumer.as_asgi())),
    path("ws/dashboard/<str:team>/", _browser_only(DashboardConsumer.as_asgi())),
]
