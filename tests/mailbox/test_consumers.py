"""mailbox/transports/consumers.py: channel-layer events that end a websocket, and which websocket an event is for."""
import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from mailbox.models import HostPresence
from teams.models import Member
from tests.support.inproc import Agent, spawn, team_new, token_for

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_reset_closes_an_agent_websocket_with_reconnect_code(api):
    """What a process taken for dead sends its websockets (mailbox/members/presence.py)."""
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(impl)
    await agent.connect()
    channel = await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)()

    await get_channel_layer().send(channel, {"type": "session.reset"})

    closed = await agent.comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4012}


async def test_a_reset_sends_the_acks_still_held_before_it_closes(api):
    """A tool frame's last acks wait for its tool_result; a reset that comes first sends
    them on their own, so the entries they acknowledge are not sent again after the hello."""
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    agent = Agent(impl)
    await agent.connect()
    channel = await database_sync_to_async(lambda: Member.objects.get(name="impl").session_channel)()
    acks = [{"entry_id": "e-1", "folded": False}]

    await get_channel_layer().send(channel, {"type": "session.acks_held", "id": "call-1", "acks": acks})
    await get_channel_layer().send(channel, {"type": "session.reset"})

    assert await agent.comm.receive_json_from(timeout=5) == {"type": "acks", "acks": acks}
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


async def test_only_the_session_that_speaks_for_the_member_gets_its_steers_prompts_and_interrupts(api):
    """Two websockets of one member: the newer hello took over. The older one (not
    gone yet, or on a process taken for dead that Redis pub/sub keeps subscribed)
    must not steer a second copy of the agent."""
    team = await team_new()
    first_token = await spawn(api, team["lead"], "alpha", "impl")
    older, newer = Agent(first_token), Agent(await token_for("alpha", "impl"))
    await older.connect(status="running")
    await newer.connect(status="running")

    sent = await api.ok(team["lead"], "send_message", target="impl", message="for the current session")
    steer = await newer.expect("steer")
    assert steer["message"]["id"] == sent["message_id"]
    assert (await api.ok(team["lead"], "interrupt_agent", target="impl"))
    await newer.expect("interrupt")
    assert await older.nothing("steer") and await older.nothing("interrupt")

    # Its next hello makes the older one current again; the replay brings what it missed.
    await older.send({"type": "hello", "status": "running"})
    welcome = await older.expect("welcome")
    assert welcome["replay"] == 1 and (await older.expect("steer"))["message"]["id"] == sent["message_id"]
    await older.close()
    await newer.close()
