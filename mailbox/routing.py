from django.urls import path

from mailbox.transports.consumers import AgentConsumer, HostConsumer

websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
    path("ws/host/", HostConsumer.as_asgi()),
]
