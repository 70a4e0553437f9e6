"""AgentSession and interrupt_agent, against the application served in-process: the turn ends,
the inbox is kept and starts the next turn."""
import asyncio

import pytest

from steerboard_agents import AgentSession, ModelReply, StepContext
from tests.agents.support import Team
from tests.agents.test_session_folding import GatedModel, until

pytestmark = pytest.mark.django_db(transaction=True)


class FailingOnce:
    def __init__(self):
        self.failed = False

    async def step(self, context: StepContext) -> ModelReply:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the model is down")
        return ModelReply(text="back")


async def start(team: Team, model) -> tuple[AgentSession, asyncio.Task]:
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200
    session = AgentSession(team.server.url, await asyncio.to_thread(team.token, "worker"), model, max_backoff=0.3)
    task = asyncio.create_task(session.run())
    await asyncio.wait_for(session.connected.wait(), 30)
    return session, task


async def test_interrupt_ends_the_turn_and_the_kept_inbox_starts_the_next(inproc_env, served):
    team = Team(inproc_env, served, "interrupting")
    model = GatedModel()
    session, task = await start(team, model)
    try:
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="one")
        await until(lambda: model.steps == 1, "the first step")
        second = (await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="two")).json()
        await until(lambda: session.stats["steers"] >= 2, "the second steer in the inbox")
        answer = await asyncio.to_thread(team.tool, "lead", "interrupt_agent", target="worker")
        assert answer.json() == {"previous_status": "running"}
        await until(lambda: model.steps == 2, "the kept message to start a turn")
        model.gate.set()
        await until(lambda: sum(e["kind"] == "turn_end" for e in session.entries) == 2 and session.idle.is_set(), "two turns")

        history = await asyncio.to_thread(team.history, "worker")
        ends = [e for e in history if e["kind"] == "turn_end"]
        assert [e["reason"] for e in ends] == ["interrupted", "done"]
        first_turn, second_turn = ends[0]["turn_id"], ends[1]["turn_id"]
        inputs = [(e["turn_id"], e["step"], e["text"]) for e in history if e["kind"] == "user_message"]
        assert inputs == [(first_turn, 0, "one"), (second_turn, 0, "two")]
        assert next(e for e in history if e["kind"] == "turn_start" and e["turn_id"] == second_turn)["cause"] == "steer"
        messages = await asyncio.to_thread(team.messages)
        assert {m["id"]: m["state"] for m in messages}[second["message_id"]] == "delivered"
    finally:
        await session.stop()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_model_ends_its_turn_and_the_session_goes_on(inproc_env, served):
    team = Team(inproc_env, served, "failing")
    session, task = await start(team, FailingOnce())
    try:
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="one")
        await until(lambda: any(e["kind"] == "turn_end" for e in session.entries) and session.idle.is_set(), "a turn")
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="two")
        await until(lambda: sum(e["kind"] == "turn_end" for e in session.entries) == 2 and session.idle.is_set(), "two")
        history = await asyncio.to_thread(team.history, "worker")
        ends = [e for e in history if e["kind"] == "turn_end"]
        assert [e["reason"] for e in ends] == ["error", "done"]
        assert "the model is down" in ends[0]["error"]
        assert [e["text"] for e in history if e["kind"] == "assistant_text"] == ["back"]
        assert session.instructions, "the session hands the team policy to its model"
    finally:
        await session.stop()
        await asyncio.gather(task, return_exceptions=True)
