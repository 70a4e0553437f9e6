"""A dashboard socket stays open only while its session stays signed in (issue 26):
a password reset, a deactivated or deleted user ring the user's sockets, which
close with 4401 at once; a session that expired or was deleted, or a change that
rang nobody, is found by the periodic recheck (frontend/consumers.py,
accounts/sessions.py). Other sessions and other people's sockets stay open."""
import asyncio
import io
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import sessions as account_sessions
from frontend import consumers
from frontend.signals import user_group
from frontend.routing import websocket_urlpatterns
from teams import services as team_services

pytestmark = pytest.mark.django_db(transaction=True)

application = URLRouter(websocket_urlpatterns)


@database_sync_to_async
def _signed_in(username: str, team: str = "") -> str:
    """A new browser session of ``username`` (made if need be): its session key."""
    if team:
        team_services.team_create(name=team)
    user = User.objects.filter(username=username).first() or User.objects.create_user(username, password="pw")
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def _open(session: str, path: str = "/ws/dashboard/alpha/") -> WebsocketCommunicator:
    socket = WebsocketCommunicator(
        application, path,
        headers=[(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
                 (b"cookie", f"sessionid={session}".encode())],
    )
    connected, _ = await socket.connect()
    assert connected
    assert (await socket.receive_json_from(timeout=5))["type"] == "subscribed"
    return socket


async def _closed_4401(socket: WebsocketCommunicator, timeout: float = 5) -> None:
    assert await socket.receive_output(timeout=timeout) == {"type": "websocket.close", "code": 4401}


async def _still_open(socket: WebsocketCommunicator) -> None:
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=5) == {"type": "pong"}


@pytest.fixture
def checks(monkeypatch):
    """The session checks that ran (each the sessions it was asked about), to wait for one
    instead of sleeping; the periodic recheck is off (an hour) unless a test sets it."""
    ran: list[dict] = []
    real = account_sessions.sessions_signed_out

    def counted(*, sessions):
        ended = real(sessions=sessions)
        ran.append(sessions)
        return ended

    monkeypatch.setattr(consumers, "sessions_signed_out", counted)
    monkeypatch.setattr(consumers, "SESSION_RECHECK_INTERVAL", 3600.0)
    return ran


async def _until(predicate, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_a_password_reset_closes_every_socket_of_the_user_on_its_doorbell(checks):
    # `manage.py operator_create NAME` resets the password: every browser of NAME is signed out.
    mine = await _signed_in("viewer", team="alpha")
    my_other_browser = await _signed_in("viewer")
    theirs = await _signed_in("someone")
    sockets = [await _open(mine), await _open(mine, "/ws/dashboard/"), await _open(my_other_browser)]
    other_person = await _open(theirs)

    await database_sync_to_async(call_command)(
        "operator_create", "viewer", "--password", "a new password 26", "--json", stdout=io.StringIO()
    )
    for socket in sockets:  # the periodic recheck is an hour away: the doorbell did it
        await _closed_4401(socket)
    await _still_open(other_person)
    for socket in (*sockets, other_person):
        await socket.disconnect()


@pytest.mark.parametrize("change", ["deactivated", "deleted"])
async def test_a_deactivated_or_deleted_user_has_its_sockets_closed_on_its_doorbell(checks, change):
    mine = await _signed_in("viewer", team="alpha")
    theirs = await _signed_in("someone")
    socket, other_person = await _open(mine), await _open(theirs)

    def apply():
        user = User.objects.get(username="viewer")
        if change == "deactivated":
            user.is_active = False
            user.save()
        else:
            user.delete()

    await database_sync_to_async(apply)()
    await _closed_4401(socket)
    await _still_open(other_person)
    await socket.disconnect()
    await other_person.disconnect()


async def test_signing_in_again_elsewhere_closes_nothing(checks, monkeypatch):
    mine = await _signed_in("viewer", team="alpha")
    socket = await _open(mine)
    await _signed_in("viewer")  # saves last_login: no session of the user ends by it
    monkeypatch.setattr(consumers, "SESSION_RECHECK_INTERVAL", 0.05)
    consumers.session_watch().recheck_now()
    await _until(lambda: len(checks) >= 2)  # two checks ran since, and found it signed in
    await _still_open(socket)
    await socket.disconnect()


async def test_the_periodic_recheck_closes_what_no_doorbell_announced(checks, monkeypatch):
    # None of these rings anyone: a queryset update sends no signal, a session expires by the
    # clock, a deleted session row (`clearsessions`, the admin) is not the user's change.
    deactivated = await _signed_in("quiet", team="alpha")
    expired = await _signed_in("viewer")
    deleted = await _signed_in("viewer")
    kept = await _signed_in("viewer")
    sockets = {name: await _open(key) for name, key in
               [("deactivated", deactivated), ("expired", expired), ("deleted", deleted), ("kept", kept)]}

    def apply():
        User.objects.filter(username="quiet").update(is_active=False)
        Session.objects.filter(session_key=expired).update(expire_date=timezone.now() - timedelta(seconds=1))
        Session.objects.filter(session_key=deleted).delete()

    rang: list[str] = []
    real_ring = consumers.DashboardConsumer.session_check

    async def ring_heard(socket, event):
        rang.append(socket.session_key)
        await real_ring(socket, event)

    monkeypatch.setattr(consumers.DashboardConsumer, "session_check", ring_heard)
    await database_sync_to_async(apply)()
    # A ring would be in the sockets' channels before this probe (a change rings after its
    # commit, before apply() returns), and each socket handles its channel in order.
    layer = get_channel_layer()
    for user_id in await database_sync_to_async(lambda: list(User.objects.values_list("pk", flat=True)))():
        await layer.group_send(user_group(user_id), {"type": "team.changed", "kind": "probe"})
    for socket in sockets.values():
        while (await socket.receive_json_from(timeout=5)) != {"type": "team.changed", "kind": "probe"}:
            pass
    assert rang == [] and checks == []  # nothing rang: the sockets are open until the recheck
    monkeypatch.setattr(consumers, "SESSION_RECHECK_INTERVAL", 0.1)
    consumers.session_watch().recheck_now()  # the hour-long wait ends; the next ones are 0.1 s
    for name in ("deactivated", "expired", "deleted"):
        await _closed_4401(sockets[name])
    await _still_open(sockets["kept"])
    for socket in sockets.values():
        await socket.disconnect()


async def test_a_session_check_reads_the_sessions_and_their_users_once_for_all_sockets(checks):
    keys = [await _signed_in("viewer", team="alpha"), await _signed_in("viewer"), await _signed_in("someone")]
    sockets = [await _open(key) for key in keys] + [await _open(keys[0], "/ws/dashboard/")]

    watched = consumers.session_watch().sockets

    def check():
        with CaptureQueriesContext(connection) as queries:
            ended = account_sessions.sessions_signed_out(
                sessions={s.session_key: s.user_id for s in watched}
            )
        return ended, len(queries)

    assert await database_sync_to_async(check)() == (set(), 2)
    for socket in sockets:
        await socket.disconnect()
