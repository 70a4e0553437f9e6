"""sdk/steerboard_agents/connection.py: a host or session that cannot reach its server when it
starts (a wrong ``--server``, a server not up yet) says so once where it shows by default
(WARNING), keeps trying, and says when it got through; losses after the first connection are
the server's restarts, said at INFO only (``-v``)."""
import asyncio
import logging

import websockets

from steerboard_agents.connection import run_reconnecting
from tests.support.live import free_port


class _Client:
    token = "sbm_test"
    max_backoff = 0.05

    def __init__(self, server: str):
        self.server = server
        self.conversations = 0

    async def _converse(self, ws) -> None:
        self.conversations += 1
        await ws.close()


async def test_a_client_that_cannot_reach_its_server_says_so_once_and_when_it_gets_through(caplog):
    port = free_port()  # nothing listens there yet
    client = _Client(f"http://127.0.0.1:{port}")
    stopping = asyncio.Event()
    caplog.set_level(logging.INFO, logger="steerboard_agents.connection")

    def lines(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "steerboard_agents.connection" and r.levelno == level]

    running = asyncio.create_task(run_reconnecting(
        client, "ws/agent", label="agent", stopping=stopping, refused=lambda status: RuntimeError(status),
    ))
    try:
        async with asyncio.timeout(10):
            while len(lines(logging.INFO)) < 4:  # four attempts refused
                await asyncio.sleep(0.02)
        [warning] = lines(logging.WARNING)
        assert f"cannot connect to ws://127.0.0.1:{port}/ws/agent/" in warning and "trying again" in warning

        async def accept(ws) -> None:
            await ws.wait_closed()

        async with websockets.serve(accept, "127.0.0.1", port):
            async with asyncio.timeout(10):
                while client.conversations < 2:  # connected, closed, connected again
                    await asyncio.sleep(0.02)
        assert lines(logging.WARNING)[1:] == [f"agent websocket: connected to ws://127.0.0.1:{port}/ws/agent/"]
    finally:
        stopping.set()
        await asyncio.wait_for(running, 10)
    # The losses after it got through (the server closing, then going away) are INFO only.
    assert len(lines(logging.WARNING)) == 2
