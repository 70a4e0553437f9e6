"""A password reset from another process closes the user's open dashboard sockets on
every daphne process (issue 26), real processes end to end: people sign in over
HTTP, their dashboards are websockets held open, and ``manage.py operator_create
NAME`` (which resets NAME's password) runs in a process of its own.

On the embedded default that command shares no channel layer with daphne: its
doorbell reaches nobody, and the periodic recheck closes the sockets within
``SESSION_RECHECK_INTERVAL``. On PostgreSQL + Redis the doorbell reaches both
processes through Redis."""
import asyncio
import json
import re
import time

import httpx
import pytest
import websockets

from frontend.consumers import SESSION_RECHECK_INTERVAL
from tests.support.live import DaphneProcess, LiveEnvironment, start_together

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path):
    environment = LiveEnvironment(tmp_path)
    servers = start_together(*(DaphneProcess(environment) for _ in range(2 if environment.scale_out else 1)))
    yield environment, servers
    for server in servers:
        server.stop()
    environment.close()


def _sign_in(server, username: str) -> str:
    """A browser's sign-in on the login page: its session cookie."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        page = client.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = client.post(
            "/login/", data={"username": username, "password": "pw-" + username, "csrfmiddlewaretoken": token},
            headers={"Referer": server.url + "/login/"},
        )
        assert answer.status_code == 302, answer.text[:500]
        return client.cookies["sessionid"]


async def _dashboard(server, session: str, team: str):
    socket = await websockets.connect(
        f"{server.ws_url}/ws/dashboard/{team}/",
        additional_headers={"Cookie": f"sessionid={session}", "Origin": server.url},
    )
    assert json.loads(await socket.recv())["type"] == "subscribed"
    return socket


async def _closed(socket, timeout: float) -> int:
    async with asyncio.timeout(timeout):
        try:
            while True:
                await socket.recv()  # doorbells may come first
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else 1006


async def test_a_password_reset_by_manage_py_closes_the_users_dashboards_on_every_process(cluster):
    environment, servers = cluster
    environment.team_create("reset")
    environment.operator_create("op")
    environment.operator_create("bystander", viewer=True)
    # Two browsers of op, on different processes when there are two; someone else beside them.
    op_sessions = [_sign_in(servers[0], "op"), _sign_in(servers[-1], "op")]
    ops = [await _dashboard(server, session, "reset") for server, session in zip(servers * 2, op_sessions)]
    bystander = await _dashboard(servers[-1], _sign_in(servers[-1], "bystander"), "reset")

    started = time.monotonic()
    await asyncio.to_thread(environment.operator_create, "op")  # the reset, in another process
    codes = await asyncio.gather(*(_closed(socket, SESSION_RECHECK_INTERVAL + 10) for socket in ops))
    took = time.monotonic() - started
    print(f"\nreset → every socket of op closed in {took:.2f} s "
          f"({len(servers)} process(es), {'Redis' if environment.scale_out else 'in-memory'} layer)")
    assert codes == [4401] * len(ops)

    # Someone else's dashboard stays open and answers.
    await bystander.send(json.dumps({"type": "ping"}))
    assert json.loads(await asyncio.wait_for(bystander.recv(), 10)) == {"type": "pong"}
    await bystander.close()
    # The old sessions are signed out for HTTP as well: the page they go to asks for a sign-in.
    with httpx.Client(base_url=servers[0].url, cookies={"sessionid": op_sessions[0]}, timeout=30) as client:
        assert client.get("/teams/reset/").status_code == 302
