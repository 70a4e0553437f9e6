"""The dashboard websocket under hostile input (issue 12, items 2, 13, 14): bad frames
get an error frame and the socket stays open; the Origin must be the socket's own
origin (scheme, host and port); signed-out sockets close with 4401, and signing
out closes the session's sockets that are already open."""
import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client, override_settings

from frontend.routing import websocket_urlpatterns
from teams import services as team_services

pytestmark = pytest.mark.django_db(transaction=True)

application = URLRouter(websocket_urlpatterns)


def _setup():
    team_services.team_create(name="alpha")
    User.objects.create_user("viewer", password="pw")
    client = Client()
    client.force_login(User.objects.get(username="viewer"))
    return client


def _socket(path, *, session=None, origin="http://127.0.0.1:8000", host="127.0.0.1:8000", extra=()):
    headers = [(b"host", host.encode())]
    if origin:
        headers.append((b"origin", origin.encode()))
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    headers.extend(extra)
    return WebsocketCommunicator(application, path, headers=headers)


async def _open(session, **kwargs):
    socket = _socket("/ws/dashboard/alpha/", session=session, **kwargs)
    connected, _ = await socket.connect()
    assert connected
    assert (await socket.receive_json_from())["type"] == "subscribed"
    return socket


async def test_bad_frames_get_an_error_frame_and_the_socket_stays_open():
    client = await database_sync_to_async(_setup)()
    socket = await _open(client.cookies["sessionid"].value)
    bad = [
        ("text", "not json"),
        ("text", "[1, 2, 3]"),
        ("text", '"a string"'),
        ("text", "[" * 100_000 + "]" * 100_000),  # deeper than json's recursion limit
        ("text", '{"type": "ping", "x": "' + "y" * 10_000 + '"}'),
        ("text", '{"type": "\\ud800"}'),
        ("bytes", b"\x00\xff binary"),
    ]
    for kind, frame in bad:
        if kind == "bytes":
            await socket.send_to(bytes_data=frame)
        else:
            await socket.send_to(text_data=frame)
        answer = await socket.receive_json_from(timeout=5)
        assert answer["type"] == "error" and answer["error"]["code"] == "VALIDATION_ERROR", (frame[:40], answer)
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=5) == {"type": "pong"}
    await socket.disconnect()


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:8666",  # another port on the same host
        "https://127.0.0.1:8000",  # another scheme
        "http://127.0.0.1",  # port 80, not 8000
        "http://localhost:8000",  # another host name, though allowed in ALLOWED_HOSTS
        "null",
        "http://127.0.0.1:8000/path",
    ],
)
async def test_an_origin_that_is_not_the_sockets_own_is_refused(origin):
    client = await database_sync_to_async(_setup)()
    socket = _socket("/ws/dashboard/alpha/", session=client.cookies["sessionid"].value, origin=origin)
    connected, _ = await socket.connect()
    assert not connected, origin
    await socket.disconnect()


async def test_the_sockets_own_origin_and_trusted_origins_are_accepted():
    client = await database_sync_to_async(_setup)()
    session = client.cookies["sessionid"].value
    for origin, host in [("http://127.0.0.1:8000", "127.0.0.1:8000"), ("http://localhost", "localhost")]:
        socket = await _open(session, origin=origin, host=host)
        await socket.disconnect()
    with override_settings(CSRF_TRUSTED_ORIGINS=["https://board.example.org"]):
        socket = await _open(session, origin="https://board.example.org", host="127.0.0.1:8000")
        await socket.disconnect()
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        socket = await _open(
            session, origin="https://127.0.0.1:8000", extra=[(b"x-forwarded-proto", b"https")]
        )
        await socket.disconnect()
        # Without the proxy's header the socket is plain ws://: an https origin is another origin.
        refused = _socket("/ws/dashboard/alpha/", session=session, origin="https://127.0.0.1:8000")
        assert not (await refused.connect())[0]
        await refused.disconnect()


async def test_signing_out_closes_the_sessions_open_sockets_with_4401():
    client = await database_sync_to_async(_setup)()
    other = await database_sync_to_async(Client)()
    await database_sync_to_async(other.force_login)(await database_sync_to_async(User.objects.get)(username="viewer"))
    mine = await _open(client.cookies["sessionid"].value)
    team_list = _socket("/ws/dashboard/", session=client.cookies["sessionid"].value)
    assert (await team_list.connect())[0]
    await team_list.receive_json_from()
    theirs = await _open(other.cookies["sessionid"].value)

    response = await database_sync_to_async(client.post)("/logout/")
    assert response.status_code == 302

    assert await mine.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    assert await team_list.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    # Another session of the same person stays signed in, and its socket open.
    await theirs.send_json_to({"type": "ping"})
    assert await theirs.receive_json_from(timeout=5) == {"type": "pong"}
    for socket in (mine, team_list, theirs):
        await socket.disconnect()


async def test_the_sockets_close_only_once_the_signed_out_session_is_gone(monkeypatch):
    # Closed earlier, a page sent to the login page could find itself still signed in there.
    from django.contrib.sessions.models import Session

    from frontend import signals

    client = await database_sync_to_async(_setup)()
    session_key = client.cookies["sessionid"].value
    mine = await _open(session_key)
    held_at_close = []
    real_close = signals._sockets_close

    async def observed(key):
        held_at_close.append(await database_sync_to_async(Session.objects.filter(session_key=key).exists)())
        await real_close(key)

    monkeypatch.setattr(signals, "_sockets_close", observed)
    response = await database_sync_to_async(client.post)("/logout/")
    assert response.status_code == 302
    assert await mine.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    assert held_at_close == [False]
    await mine.disconnect()
