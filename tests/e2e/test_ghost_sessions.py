"""No ghost sessions after a PostgreSQL outage (issue 26 item 4): a session and a host
whose websockets close while PostgreSQL is down could not write their detach. Before,
the member still showed ``idle`` 180 s after PostgreSQL returned, the host row said a
host was connected, and a new message stayed ``accepted`` forever (pushed to a dead
channel; no host asked). Now the process ends what its closed sockets left once the
database answers (recovery.presence_reconcile).

A PostgreSQL cluster of its own (tests/support/services.py) that the test stops; it
runs in the PostgreSQL run of scripts/test.sh. tests/mailbox/test_presence_reconcile.py
injects the same failure on both backends.
"""
import asyncio
import json
import time

import httpx
import pytest

from tests.support import live
from tests.support.live import postgres_run_only
from tests.support.wire_agent import socket_open, spawn_with_tokens, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    postgres_run_only("stops a PostgreSQL cluster of its own"),
]


@pytest.fixture
def own_database(tmp_path, monkeypatch):
    # Recovery's redelivery and reaping kept out of the way: what ends the ghosts is the
    # process's own reconcile, not a sweep that would push again or reap.
    with live.own_database(tmp_path, monkeypatch, STEERBOARD_REDELIVER_AFTER="60") as running:
        yield running


async def test_sockets_closed_during_a_postgresql_outage_leave_no_ghost_session_or_host(own_database):
    environment, server, pg = own_database
    team = environment.team_create("ghost")
    lead = team["lead"]["token"]
    token = spawn_with_tokens(environment, server, lead, "ghost", ["impl"])["impl"]
    host = await socket_open(server, team["host_token"], "/ws/host/", hello=False)
    session = await socket_open(server, token, "/ws/agent/", hello=True)

    def rows() -> tuple[str, int, int]:
        status = environment.query("SELECT session_state FROM teams_member WHERE name = 'impl'")[0][0]
        return (status, environment.query("SELECT count(*) FROM mailbox_sessionpresence")[0][0],
                environment.query("SELECT count(*) FROM mailbox_hostpresence")[0][0])

    await wait_until(lambda: rows() == ("idle", 1, 1), timeout=30, what="the session and the host recorded")

    await asyncio.to_thread(pg.stop, "fast")
    await session.close()
    await host.close()
    # Their detaches meet the outage (each says so in the log) before PostgreSQL is back.
    await wait_until(lambda: all(f"detaching {kind} failed" in server.log() for kind in ("AgentConsumer", "HostConsumer")),
                     timeout=30, what="both detaches failing on the outage")
    await asyncio.to_thread(pg.start)
    back = time.monotonic()

    await wait_until(lambda: rows() == ("inactive", 0, 0), timeout=30, what="the ghosts ended")
    print(f"\nghost session and host ended {time.monotonic() - back:.2f}s after PostgreSQL came back")
    assert "detaching AgentConsumer failed" in server.log()  # the outage did meet the detach
    # A new message is not pushed into the void: no session, no host, so it waits and says why.
    response = httpx.post(f"{server.url}/api/v1/tools/send_message", json={"target": "impl", "message": "there?"},
                          headers={"Authorization": f"Bearer {lead}"}, timeout=30)
    assert response.status_code == 200, response.text
    sent = response.json()
    assert sent["status"] == "queued" and sent["delivery"]["host_connected"] is False
    # And a host that connects now is asked to resume it.
    host = await socket_open(server, team["host_token"], "/ws/host/", hello=False)
    try:
        start = None
        async with asyncio.timeout(10):
            while start is None or start.get("type") != "start":
                start = json.loads(await host.recv())
        assert start["member"] == "impl" and start["reason"] == "resume"
    finally:
        await host.close()
