"""AgentSession folding, against the application served in-process (tests/support/inproc.py):
a steer repeated for a message id the session already holds leaves one history entry."""
import asyncio

import pytest
from channels.db import database_sync_to_async

from mailbox.operations import recovery
from steerboard_agents import ModelReply, StepContext
from tests.agents.support import Team, worker_session
from tests.support.inproc import LIVE_TIMINGS

pytestmark = pytest.mark.django_db(transaction=True)


class GatedModel:
    """A plugged-in model that holds its step until the test opens the gate, then answers."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.steps = 0

    async def step(self, context: StepContext) -> ModelReply:
        self.steps += 1
        await self.gate.wait()
        heard = [e["text"] for e in context.turn_entries() if e["kind"] == "user_message"]
        return ModelReply(text="heard: " + ", ".join(heard))


async def until(predicate, what, timeout=30):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (await result if asyncio.iscoroutine(result := predicate()) else result):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_repeated_steer_is_folded_and_the_history_holds_the_message_once(inproc_env, served, clock):
    team = Team(inproc_env, served, "folding")
    send = lambda message: asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message=message)
    model = GatedModel()
    async with worker_session(team, model) as session:
        first = (await send("one")).json()["message_id"]
        await until(lambda: model.steps == 1, "the first step")
        second = (await send("two")).json()["message_id"]  # waits in the inbox: the step is held
        await until(lambda: session.stats["steers"] >= 2, "the second steer")

        # Recovery does not push again to a session of the same process that still holds
        # its steers: each of the three redeliveries comes due (REDELIVER_AFTER, then 3x and
        # 7x it), and a pass then admits nothing ...
        after = LIVE_TIMINGS["REDELIVER_AFTER"]
        for factor in recovery.REDELIVERY_BACKOFF:
            clock.shift(after * factor + 1)
            assert (await database_sync_to_async(recovery.recovery_pass)())["admitted"] == 0
        assert session.stats["folded_steers"] == 0
        # ... and a reconnect replays every undelivered message.
        connects, folded = session.stats["connects"], session.stats["folded_steers"]
        session.drop_connection()
        await until(lambda: session.stats["connects"] > connects, "the reconnect")
        await until(lambda: session.stats["folded_steers"] > folded, "the replayed steer")

        model.gate.set()
        await until(lambda: session.idle.is_set() and not session._inbox, "both messages in the conversation")

        # An integrated message steered again: reported again, folded by the server, not added twice.
        acks = session.stats["folded_acks"]
        session._on_steer({"id": first, "sender": "lead", "target": "worker", "content": "one", "seq": 1})
        await until(lambda: session.stats["folded_acks"] > acks, "the folded re-report")

        history = await asyncio.to_thread(team.history, "worker")
        held = [e["source"]["message_id"] for e in history if e["kind"] == "user_message"]
        assert sorted(held) == sorted([first, second])
        local = [e["source"]["message_id"] for e in session.entries if e["kind"] == "user_message"]
        assert sorted(local) == sorted([first, second])
        assert [e["id"] for e in session.entries] == [e["id"] for e in history]
        messages = await asyncio.to_thread(team.messages)
        assert {m["id"]: m["state"] for m in messages} == {first: "delivered", second: "delivered"}


async def test_a_prompt_that_arrives_during_a_turn_waits_and_runs_as_its_own_turn_once(inproc_env, served):
    team = Team(inproc_env, served, "prompt-race")
    model = GatedModel()
    async with worker_session(team, model) as session:
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="work")
        await until(lambda: model.steps == 1, "the turn's first step")
        prompt = await asyncio.to_thread(team.prompt, "worker", "a human question")
        # The race the Queue adapter cannot rule out: its push lands just as a turn began.
        session._on_prompt({"id": prompt["id"], "author": "op", "content": "a human question"})
        # It waits in the session's prompt queue; the turn's gated step is its next boundary.
        assert [p["id"] for p in session._turns.prompts] == [prompt["id"]]
        assert not any(e["kind"] == "prompt" for e in session.entries), "a prompt never enters a running turn"
        model.gate.set()
        await until(lambda: sum(e["kind"] == "turn_end" for e in session.entries) == 2, "two turns")
        # Once completed the prompt is never offered again; any push of it before then has folded.
        async def completed():
            listed = await asyncio.to_thread(team.op, "GET", "/teams/prompt-race/prompts")
            return listed.json()["prompts"][0]["state"] == "completed"

        await until(completed, "the prompt completed")
        history = await asyncio.to_thread(team.history, "worker")
        kinds = [(e["kind"], e.get("cause")) for e in history if e["kind"] in ("turn_start", "prompt")]
        assert kinds == [("turn_start", "steer"), ("turn_start", "prompt"), ("prompt", None)]
        assert sum(e["kind"] == "turn_start" for e in session.entries) == 2
