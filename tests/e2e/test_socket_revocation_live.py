"""Revocation reaches agent websockets opened before it, on every process, within the
bound REST has (STEERBOARD_TOKEN_CACHE_SECONDS, 5 s by default; docs/operations.md,
"Token lifecycle"): real daphne processes, a real websocket client, and the revoke made
by another process (a manage.py command, or REST on a second server)."""
import asyncio
import json
import time

import httpx
import pytest
import websockets

from tests.support.live import DaphneProcess, LiveEnvironment, postgres_run_only
from tests.support.wire_agent import socket_open, spawn, wait_until

# The first two share one daphne and its environment (tests/conftest.py), each on a team of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), pytest.mark.shared_server]

BOUND = 5.0  # TOKEN_CACHE_SECONDS' default


async def _acting_until_closed(ws, frames: list[dict], target: str = "lead") -> tuple[int, float, list[dict]]:
    """Send a message every 0.2 s until the server closes the socket: its close code,
    when (monotonic), and the frames that came meanwhile (``frames``, filled as they come)."""

    async def read():
        async for text in ws:
            frames.append(json.loads(text))

    reader = asyncio.ensure_future(read())
    i = 0
    try:
        while not reader.done():
            try:
                await ws.send(json.dumps({"type": "tool", "id": f"t{i}", "name": "send_message",
                                          "arguments": {"target": target, "message": f"after the revoke #{i}"}}))
            except websockets.ConnectionClosed:
                break
            i += 1
            await asyncio.wait([reader], timeout=0.2)
        await asyncio.wait_for(reader, 10)
    except websockets.ConnectionClosed:
        pass
    return ws.close_code, time.monotonic(), frames


async def _acting(ws) -> asyncio.Future:
    """``_acting_until_closed`` under way, once the server has answered two of its sends."""
    frames: list[dict] = []
    acting = asyncio.ensure_future(_acting_until_closed(ws, frames))
    await wait_until(lambda: acting.done() or sum(f["type"] == "tool_result" for f in frames) >= 2,
                     timeout=30, what="two sends answered")
    return acting


async def test_a_token_revoked_by_another_process_closes_its_open_socket_within_the_bound(live_env, daphne_server):
    team = live_env.team_create("rv")
    lead = team["lead"]["token"]
    spawn(daphne_server, lead, ["impl"])
    token = live_env.manage_json("member_token", "rv", "impl")["token"]
    ws = await socket_open(daphne_server, token)
    acting = await _acting(ws)

    revoked_at = time.monotonic()
    assert (await asyncio.to_thread(live_env.manage_json, "member_token", "rv", "impl", "--revoke"))["revoked"] == 1
    code, closed_at, frames = await asyncio.wait_for(acting, BOUND + 10)

    print(f"\nsocket closed {closed_at - revoked_at:.2f}s after another process revoked its token")
    assert code == 4401
    assert any(f["type"] == "error" and f["error"]["code"] == "UNAUTHENTICATED" for f in frames)
    assert closed_at - revoked_at <= BOUND
    # Nothing was stored after the close, and the token opens nothing any more.
    stored = live_env.query("SELECT count(*) FROM mailbox_teammessage m JOIN teams_member s ON s.id = m.sender_id "
                            "JOIN teams_team t ON t.id = s.team_id WHERE s.name = 'impl' AND t.name = 'rv'")[0][0]
    answered = sum(1 for f in frames if f["type"] == "tool_result" and "result" in f)
    assert answered <= stored <= answered + 2  # the answered ones, and any in flight at the close
    with pytest.raises(websockets.InvalidStatus):
        await socket_open(daphne_server, token, hello=False)


async def test_retiring_by_command_closes_every_socket_of_the_member(live_env, daphne_server):
    team = live_env.team_create("rt")
    lead = team["lead"]["token"]
    spawn(daphne_server, lead, ["impl"])
    older = await socket_open(daphne_server, live_env.manage_json("member_token", "rt", "impl")["token"])
    current = await socket_open(daphne_server, live_env.manage_json("member_token", "rt", "impl")["token"])
    acting = await _acting(older)

    retired_at = time.monotonic()
    assert (await asyncio.to_thread(live_env.manage_json, "member_retire", "rt", "impl"))["revoked"] == 2
    code, closed_at, frames = await asyncio.wait_for(acting, BOUND + 10)
    assert code == 4401 and closed_at - retired_at <= BOUND
    await asyncio.wait_for(current.wait_closed(), BOUND + 1)
    assert current.close_code in (4012, 4401)
    assert time.monotonic() - retired_at <= BOUND + 1
    # A retired member stored nothing after its retirement was answered.
    late = live_env.query(
        "SELECT count(*) FROM mailbox_teammessage m JOIN teams_member s ON s.id = m.sender_id "
        "JOIN teams_team t ON t.id = s.team_id WHERE s.name = 'impl' AND s.phase = 'retired' AND t.name = 'rt'"
    )[0][0]
    answered = sum(1 for f in frames if f["type"] == "tool_result" and "result" in f)
    assert late <= answered + 2


@postgres_run_only("several processes on PostgreSQL + Redis")
async def test_a_rest_revoke_on_one_process_closes_the_socket_held_by_another(tmp_path):
    environment = LiveEnvironment(tmp_path, scale_out=True)
    a = DaphneProcess(environment).start()
    b = DaphneProcess(environment).start()
    try:
        team = environment.team_create("mp")
        lead = team["lead"]["token"]
        operator = environment.operator_create("op")["token"]
        spawn(b, lead, ["impl"])
        token = environment.manage_json("member_token", "mp", "impl")["token"]
        ws = await socket_open(a, token)
        acting = await _acting(ws)

        revoked_at = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(f"{b.url}/api/v1/teams/mp/members/impl/tokens/revoke",
                                         headers={"Authorization": f"Token {operator}"})
        assert response.status_code == 200 and response.json()["revoked"] == 1
        code, closed_at, frames = await asyncio.wait_for(acting, BOUND + 10)
        print(f"\nsocket on A closed {closed_at - revoked_at:.2f}s after B revoked its token")
        assert code == 4401 and closed_at - revoked_at <= BOUND
        with pytest.raises(websockets.InvalidStatus):
            await socket_open(a, token, hello=False)
    finally:
        a.stop()
        b.stop()
        environment.close()
