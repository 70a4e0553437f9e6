"""Several daphne processes on one PostgreSQL + Redis (architecture.md section 5).

They run on a PostgreSQL database and Redis prefix of their own
(LiveEnvironment(scale_out=True)), once, in the PostgreSQL run of scripts/test.sh.
"""
import asyncio

import httpx
import pytest

from tests.support.audit import delivery_audit, target_histories
from tests.support.live import DaphneProcess, LiveEnvironment, postgres_run_only
from tests.support.wire_agent import WireAgent, WireHost, send_message, spawn_with_tokens, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    # On PostgreSQL + Redis whatever the run is on: the embedded run would only repeat them.
    postgres_run_only("several processes on PostgreSQL + Redis"),
]


@pytest.fixture
def scale_env(tmp_path):
    environment = LiveEnvironment(tmp_path, scale_out=True)
    assert environment.scale_out, "PostgreSQL + Redis are required for the multi-process tests"
    yield environment
    environment.close()


@pytest.fixture
def two_servers(scale_env):
    a = DaphneProcess(scale_env).start()
    b = DaphneProcess(scale_env).start()
    yield a, b
    a.stop()
    b.stop()


def member_ids(environment) -> dict[str, int]:
    return {name: pk for pk, name in environment.query("SELECT id, name FROM teams_member")}


async def stream(client, server, lead: str, targets: list[str], count: int, sent: dict[str, list[str]], start: int = 0):
    """Per target, messages one after another (so seq order is send order); targets side by side."""

    async def one_target(target: str) -> None:
        for i in range(start, start + count):
            result = await send_message(client, server.url, lead, target, f"{target} #{i}")
            sent[target].append(result["message_id"])

    await asyncio.gather(*(one_target(t) for t in targets))


async def test_sessions_on_a_receive_in_order_what_is_sent_through_b(scale_env, two_servers):
    a, b = two_servers
    team = scale_env.team_create("mp")
    lead = team["lead"]["token"]
    names = ["alpha", "beta", "gamma"]
    tokens = spawn_with_tokens(scale_env, b, lead, "mp", names)
    agents = {n: WireAgent(n, tokens[n], [a.ws_url]).start() for n in names}
    try:
        await wait_until(lambda: all(x.welcomed.is_set() for x in agents.values()), timeout=30, what="hello on A")
        sent = {n: [] for n in names}
        async with httpx.AsyncClient(timeout=30) as client:
            await stream(client, b, lead, names, 25, sent)
        await wait_until(
            lambda: all(len(agents[n].integrated) == 25 and agents[n].settled for n in names),
            timeout=60,
            what="every message integrated on A",
        )
        for n in names:
            assert agents[n].integrated == sent[n]
            assert agents[n].connects == 1
    finally:
        for agent in agents.values():
            await agent.stop()
    audit = delivery_audit(scale_env)
    assert audit.ok, audit.details()
    assert audit.delivered == 75


async def test_a_host_on_b_cold_resumes_a_member_whose_message_was_sent_through_a(scale_env, two_servers):
    a, b = two_servers
    team = scale_env.team_create("mp")
    lead = team["lead"]["token"]
    host = WireHost(team["host_token"], b.ws_url).start()
    try:
        await asyncio.wait_for(host.connected.wait(), 10)
        # Provisioning goes through the host on B too; the session it starts says hello on B.
        spawn_with_tokens(scale_env, a, lead, "mp", ["worker"])
        await wait_until(lambda: "worker" in host.agents and host.agents["worker"].welcomed.is_set(), timeout=30,
                         what="worker provisioned")
        # The session ends: the member is inactive.
        await host.agents["worker"].stop()
        await wait_until(
            lambda: scale_env.query("SELECT session_state FROM teams_member WHERE name = 'worker'") == [("inactive",)],
            timeout=15,
            what="worker inactive",
        )
        async with httpx.AsyncClient(timeout=30) as client:
            result = await send_message(client, a.url, lead, "worker", "wake up and read this")
        await wait_until(lambda: any(s["reason"] == "resume" for s in host.starts), timeout=30, what="a resume start")
        resumed = host.agents["worker"]
        await wait_until(lambda: result["message_id"] in resumed.integrated and resumed.settled, timeout=30,
                         what="the message integrated by the resumed session")
        assert [s["reason"] for s in host.starts][:1] == ["provision"]
    finally:
        await host.stop()
    audit = delivery_audit(scale_env)
    assert audit.ok, audit.details()
    assert audit.delivered == 1


async def test_kill_9_of_one_process_mid_stream_loses_nothing_and_duplicates_nothing(scale_env, two_servers):
    a, b = two_servers
    team = scale_env.team_create("mp")
    lead = team["lead"]["token"]
    names = ["n1", "n2", "n3", "n4"]
    tokens = spawn_with_tokens(scale_env, b, lead, "mp", names)
    # Sessions start on A and fail over to B.
    agents = {n: WireAgent(n, tokens[n], [a.ws_url, b.ws_url]).start() for n in names}
    sent = {n: [] for n in names}
    try:
        await wait_until(lambda: all(x.welcomed.is_set() for x in agents.values()), timeout=30, what="hello on A")
        async with httpx.AsyncClient(timeout=30) as client:
            first = asyncio.create_task(stream(client, b, lead, names, 40, sent))
            await wait_until(lambda: sum(len(v) for v in sent.values()) >= 40, timeout=60, what="the stream to start")
            a.kill()
            await first
            await stream(client, b, lead, names, 10, sent, start=40)
        await wait_until(
            lambda: all(len(agents[n].integrated) == 50 and agents[n].settled for n in names),
            timeout=90,
            what="every message integrated after fail-over",
        )
        for n in names:
            assert agents[n].integrated == sent[n]
            assert agents[n].connects >= 2
    finally:
        for agent in agents.values():
            await agent.stop()
    audit = delivery_audit(scale_env)
    assert audit.ok, audit.details()
    assert audit.delivered == 200
    histories = target_histories(scale_env)
    ids = member_ids(scale_env)
    for n in names:
        assert histories[ids[n]] == sent[n]


async def test_a_member_left_running_by_a_killed_process_is_resumed_by_a_live_host(scale_env, two_servers):
    """Stale state after kill -9: the member still says running on a dead channel,
    and a dead host row says a host is connected. Recovery reaps both, and the
    host that is alive (on B) cold-resumes the member."""
    a, b = two_servers
    team = scale_env.team_create("mp")
    lead = team["lead"]["token"]
    tokens = spawn_with_tokens(scale_env, b, lead, "mp", ["solo"])
    doomed_host = WireHost(team["host_token"], a.ws_url, autostart=False).start()
    agent = WireAgent("solo", tokens["solo"], [a.ws_url], status="running").start()
    try:
        await asyncio.wait_for(doomed_host.connected.wait(), 10)
        await wait_until(lambda: agent.welcomed.is_set(), timeout=30, what="hello on A")
        # The socket opens before A records the host (host_arrived runs after accept).
        await wait_until(lambda: scale_env.query("SELECT COUNT(*) FROM mailbox_hostpresence") == [(1,)],
                         timeout=30, what="A recorded the host")
        a.kill()
        await agent.stop()  # the agent went down with its machine: nobody reconnects
        await doomed_host.stop()
        # Right after the kill the database still believes in both.
        assert scale_env.query("SELECT session_state FROM teams_member WHERE name = 'solo'") == [("running",)]
        assert scale_env.query("SELECT COUNT(*) FROM mailbox_hostpresence") == [(1,)]
        async with httpx.AsyncClient(timeout=30) as client:
            result = await send_message(client, b.url, lead, "solo", "are you there?")
        live_host = WireHost(team["host_token"], b.ws_url).start()
        live_host.last_seq["solo"] = agent.last_seq
        try:
            await wait_until(lambda: "solo" in live_host.agents, timeout=60, what="the live host asked to resume solo")
            resumed = live_host.agents["solo"]
            await wait_until(lambda: result["message_id"] in resumed.integrated and resumed.settled, timeout=30,
                             what="the message integrated after cold-resume")
            assert [s["reason"] for s in live_host.starts] == ["resume"]
            hosts = scale_env.query("SELECT COUNT(*) FROM mailbox_hostpresence")
            assert hosts == [(1,)]  # only the live one
        finally:
            await live_host.stop()
    finally:
        await agent.stop()
    audit = delivery_audit(scale_env)
    assert audit.ok, audit.details()
