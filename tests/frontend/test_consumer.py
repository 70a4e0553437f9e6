"""The dashboard websocket: who gets in, and what it forwards."""
import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from frontend.routing import websocket_urlpatterns
from mailbox.plumbing import events
from teams import services as team_services

pytestmark = pytest.mark.django_db(transaction=True)

application = URLRouter(websocket_urlpatterns)


def _setup():
    team, *_ = team_services.team_create(name="alpha")
    user = User.objects.create_user("viewer", password="pw")
    client = Client()
    client.force_login(user)
    return team, client.cookies["sessionid"].value


def _socket(path, *, session=None, origin="http://127.0.0.1:8000"):
    headers = [(b"host", b"127.0.0.1:8000")]
    if origin:
        headers.append((b"origin", origin.encode()))
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def test_signed_in_socket_is_subscribed_and_hears_team_changes():
    team, session = await database_sync_to_async(_setup)()
    socket = _socket("/ws/dashboard/alpha/", session=session)
    connected, _ = await socket.connect()
    assert connected
    assert await socket.receive_json_from() == {"type": "subscribed", "team": "alpha"}
    await database_sync_to_async(events.send_now)(
        events.dashboard_group(team.pk), {"type": "team.changed", "kind": "message", "target": "lead"}
    )
    assert await socket.receive_json_from() == {"type": "team.changed", "kind": "message", "target": "lead"}
    await socket.disconnect()


async def test_team_list_socket_hears_every_team():
    team, session = await database_sync_to_async(_setup)()
    socket = _socket("/ws/dashboard/", session=session)
    connected, _ = await socket.connect()
    assert connected
    await socket.receive_json_from()
    await database_sync_to_async(events.send_now)(events.dashboard_group(team.pk), {"type": "team.changed", "kind": "task"})
    assert (await socket.receive_json_from())["kind"] == "task"
    await socket.disconnect()


async def test_socket_without_a_session_is_closed_with_4401():
    """Accepted, then closed: a browser sees the 4401 (a refused handshake is only an HTTP 403 to it)."""
    await database_sync_to_async(_setup)()
    socket = _socket("/ws/dashboard/alpha/")
    connected, _ = await socket.connect()
    assert connected
    assert await socket.receive_output() == {"type": "websocket.close", "code": 4401}
    await socket.disconnect()  # end the refused consumer's channel-layer read


async def test_socket_from_another_origin_or_without_origin_is_refused():
    _, session = await database_sync_to_async(_setup)()
    for origin in ("https://evil.example", None):
        socket = _socket("/ws/dashboard/alpha/", session=session, origin=origin)
        connected, _ = await socket.connect()
        assert not connected, origin
        await socket.disconnect()  # end the refused consumer's channel-layer read (it hung teardown on Redis)


async def test_socket_for_an_unknown_team_is_refused():
    _, session = await database_sync_to_async(_setup)()
    socket = _socket("/ws/dashboard/nope/", session=session)
    connected, _ = await socket.connect()
    assert connected
    assert await socket.receive_output() == {"type": "websocket.close", "code": 4404}
    await socket.disconnect()  # end the refused consumer's channel-layer read
