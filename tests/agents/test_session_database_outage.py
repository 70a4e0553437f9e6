"""An SDK session through a PostgreSQL outage in the middle of a turn: its entries
meet SERVICE_UNAVAILABLE (an error frame, then close 4503) and its tool calls 503s;
when the database is back every entry of the turn is in the stored history, once,
in order, and every tool call has its result.

A PostgreSQL cluster of its own (tests/support/services.py) that the test stops;
it runs in the PostgreSQL run of scripts/test.sh.
"""
import asyncio

import pytest

from steerboard_agents import AgentSession, ModelReply, StepContext, ToolCall
from tests.agents.support import Team
from tests.agents.test_session_folding import until
from tests.support.live import postgres_run_only

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    postgres_run_only("stops a PostgreSQL cluster of its own"),
]
STEPS = 12


class SlowScript:
    """A turn of STEPS steps, a quarter of a second each, each calling list_agents."""

    async def step(self, context: StepContext) -> ModelReply:
        await asyncio.sleep(0.25)
        if context.step < STEPS:
            return ModelReply(text=f"step {context.step}", tool_calls=[ToolCall("list_agents", {})])
        return ModelReply(text="done")


async def test_a_turn_through_a_database_outage_loses_no_entry(own_database):
    environment, server, pg = own_database
    team = Team(environment, server, "outage")
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200
    session = AgentSession(server.url, await asyncio.to_thread(team.token, "worker"), SlowScript(), max_backoff=0.3)
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        await asyncio.to_thread(team.prompt, "worker", "go")
        await until(lambda: sum(e["kind"] == "tool_result" for e in session.entries) >= 2, "the turn under way")
        connects = session.stats["connects"]
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.sleep(2)
        await asyncio.to_thread(pg.start)
        try:
            await until(lambda: any(e["kind"] == "turn_end" for e in session.entries) and session.idle.is_set()
                        and not session.unacknowledged, "the turn's end, every entry acknowledged", timeout=90)
        except AssertionError as exc:  # say where it stopped: the session's side and the server's
            raise AssertionError(
                f"{exc}\nsession: stats {session.stats}, idle {session.idle.is_set()}, "
                f"{session.unacknowledged} unacknowledged, last entries "
                f"{[e['kind'] for e in session.entries[-6:]]}\nserver log, last lines:\n"
                + server.log_path.read_text(errors="replace")[-4000:]
            ) from None
        assert session.stats["connects"] > connects, "the outage reached the session (4503, then a reconnect)"
        history = await asyncio.to_thread(team.history, "worker")
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)
    stored = [e["id"] for e in history]
    assert stored == [e["id"] for e in session.entries], "every entry of the session is stored, once, in order"
    results = [e for e in history if e["kind"] == "tool_result"]
    assert len(results) == STEPS and all("result" in e for e in results), results
