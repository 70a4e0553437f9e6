"""A websocket that closes while the database is out of reach leaves no ghost
(recovery.presence_reconcile, issue 26 item 4).

Its detach cannot be written then: before, it was logged and never tried again, so the
member stayed ``idle``/``running`` with a session nobody reads, the host row kept saying a
host was connected, and a new message was pushed into the void and stayed ``accepted``.
Here the failure is injected on purpose (the first detach write raises the database's
OperationalError, as it does when PostgreSQL is down); the process ends the rows itself
once the database takes writes again. tests/e2e/test_ghost_sessions.py does the same
with a real PostgreSQL stopped.
"""
import asyncio

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError

from mailbox.members import hosts, sessions
from mailbox.models import HostPresence, SessionPresence
from mailbox.operations import recovery
from teams.models import Member
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


def _failing_once(monkeypatch, module, name: str) -> list[str]:
    real = getattr(module, name)
    failed: list[str] = []

    def once(**kwargs):
        if not failed:
            failed.append(kwargs["channel"])
            raise OperationalError("connection to server at \"127.0.0.1\", port 5432 failed: Connection refused")
        return real(**kwargs)

    monkeypatch.setattr(module, name, once)
    return failed


async def _until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await database_sync_to_async(predicate)():
            await asyncio.sleep(0.05)


async def host_and_session(api, name: str, status: str) -> tuple[dict, Agent, Agent]:
    """Team ``name`` with its host connected and a session of its member impl in ``status``,
    both recorded as present."""
    team = await team_new(name)
    impl = await spawn(api, team["lead"], name, "impl")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    session = Agent(impl)
    await session.connect(status)
    await _until(lambda: HostPresence.objects.exists())
    return team, host, session


async def test_a_session_and_a_host_whose_detach_failed_are_ended_once_the_database_answers(api, monkeypatch):
    team, host, session = await host_and_session(api, "ghosts", "idle")
    session_failed = _failing_once(monkeypatch, sessions, "session_closed")
    host_failed = _failing_once(monkeypatch, hosts, "host_disconnected")

    await session.close()
    await host.close()

    # Both detaches failed once; the process ends the rows itself, no new connection needed.
    await _until(lambda: not SessionPresence.objects.exists() and not HostPresence.objects.exists())
    assert session_failed and host_failed
    impl_member = await database_sync_to_async(lambda: Member.objects.get(name="impl"))()
    assert impl_member.status == "inactive" and impl_member.session_channel == ""
    # So a new message is not pushed into the void: it waits for a host, and says so.
    sent = await api.ok(team["lead"], "send_message", target="impl", message="anyone there?")
    assert sent["status"] == "queued"
    assert sent["delivery"]["target_status"] == "inactive" and sent["delivery"]["host_connected"] is False


async def test_reconcile_leaves_the_rows_of_open_sockets_alone(api):
    _, host, session = await host_and_session(api, "alive", "running")

    assert await database_sync_to_async(recovery.presence_reconcile)() == {"sessions_closed": 0, "hosts_dropped": 0}
    impl_member = await database_sync_to_async(lambda: Member.objects.get(name="impl"))()
    assert impl_member.status == "running"
    assert await database_sync_to_async(SessionPresence.objects.count)() == 1
    assert await database_sync_to_async(HostPresence.objects.count)() == 1
    await session.close()
    await host.close()
