"""Websocket routes of every app."""
from frontend.routing import websocket_urlpatterns as frontend_ws
from mailbox.routing import websocket_urlpatterns as mailbox_ws

websocket_urlpatterns = mailbox_ws + frontend_ws
