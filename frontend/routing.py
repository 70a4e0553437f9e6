"""The dashboard's websocket routes.

Browsers authenticate with the session cookie and always send Origin, so these
routes (and only these: /ws/agent/ and /ws/host/ use bearer tokens and no
Origin) are wrapped in an origin check against ALLOWED_HOSTS and the session
auth middleware.
"""
from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from frontend.consumers import DashboardConsumer


def _browser_only(app):
    return AllowedHostsOriginValidator(AuthMiddlewareStack(app))


websocket_urlpatterns = [
    path("ws/dashboard/", _browser_only(DashboardConsumer.as_asgi())),
    path("ws/dashboard/<str:team>/", _browser_only(DashboardConsumer.as_asgi())),
]
