"""mailbox/consumers.py: channel-layer events that end a websocket."""
import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from mailbox.models import HostPresence
from teams.models import Member
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_reset_closes_an_agent_websocket_with_reconnect_code(api):
    """What a process taken for dead sends its websockets (mailbox/presence.py)."""
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(impl)
    await agent.connect()
    channel = await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)()

    await get_channel_layer().send(channel, {"type": "session.reset"})

    closed = await agent.comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4012}


async def test_a_reset_closes_a_host_websocket_with_reconnect_code(api):
    team = await team_new()
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    # The host is recorded just after the websocket is accepted.
    channel = None
    for _ in range(100):
        channel = await database_sync_to_async(lambda: HostPresence.objects.values_list("channel", flat=True).first())()
        if channel:
            break
        await asyncio.sleep(0.05)

    await get_channel_layer().send(channel, {"type": "host.reset"})

    closed = await host.comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4012}
