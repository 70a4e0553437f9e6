"""Issue 12, item 9, against the application served in-process: an AgentSession whose entry is
refused by the member's history quota (HISTORY_QUOTA_EXCEEDED, with its entry_id and
retry_after) sends it again after that pause instead of losing it, so the history
ends up whole, only slower. Its subject is that pause: the session waits it out in real time."""
import asyncio

import pytest

from steerboard_agents import ModelReply, StepContext
from tests.agents.support import Team, worker_session

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class ShortModel:
    async def step(self, context: StepContext) -> ModelReply:
        return ModelReply(text="ok")


async def until(predicate, what, timeout=60):
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_a_session_waits_out_the_history_quota_and_loses_no_entry(inproc_env, served, settings):
    # 30 000 bytes a minute: 500 bytes a second after the first 30 000.
    settings.STEERBOARD = {**settings.STEERBOARD, "HISTORY_BYTES_PER_MINUTE": 30_000}
    server = served
    team = Team(inproc_env, server, "quota")
    async with worker_session(team, ShortModel()) as session:
        sent = []
        # The first message's turn is about the whole minute's bytes (the entry that carries
        # it, or the ones after it, wait for the quota); each later entry then waits for the
        # bucket to refill by its own size, at 500 bytes a second: the two later turns are some
        # 2 500 bytes past the minute's, about five seconds (so they are refused even when a
        # loaded machine takes that long to send them).
        for i, size in enumerate([29_600, 300, 300]):
            answer = await asyncio.to_thread(
                team.tool, "lead", "send_message", target="worker", message=f"{i}:" + "x" * size
            )
            assert answer.status_code == 200, answer.text
            sent.append(answer.json()["message_id"])

        async def all_delivered():
            history = await asyncio.to_thread(team.history, "worker")
            held = {e.get("source", {}).get("message_id") for e in history if e["kind"] == "user_message"}
            return set(sent) <= held and session.idle.is_set()

        await until(all_delivered, "every message in the worker's history")
        assert session.stats.get("quota_waits", 0) >= 1  # the quota did refuse, and the session waited
        states = {m["id"]: m["state"] for m in await asyncio.to_thread(team.messages)}
        assert [states[m] for m in sent] == ["delivered"] * 3
