"""ask_human through the SDK (issue 28 items 1-2): a model asks a
person for an approval and waits for the answer inside its step (``await_message`` with the
``ask_id``); an operator's answer over REST reaches the running session over its websocket and
enters the conversation with the human-answer source, the decision and who answered. The same
answer reaches a member whose session ended meanwhile: its host resumes it cold, and the answer
is replayed to the new session. Against the application served in-process, but for the
restart, which needs a daphne process to kill."""
import asyncio
from contextlib import asynccontextmanager

import pytest

from steerboard_agents import Host, ModelReply, StepContext, ToolCall
from tests.agents.support import Team, worker_session
from tests.agents.test_session_folding import until



def _answers(context: StepContext) -> list[dict]:
    return [e["source"] for e in context.entries
            if e.get("kind") == "user_message" and (e.get("source") or {}).get("kind") == "human-answer"]


class AskingModel:
    """On a message: ask a person for approval, wait for the answer in the same turn, then say
    what was decided. Reads only the conversation, so a cold-resumed session's model goes on."""

    def __init__(self, member: str = ""):
        self.member = member
        self.waits: list[dict] = []

    async def step(self, context: StepContext) -> ModelReply:
        answers = _answers(context)
        if answers:
            return ModelReply(text=f"decided: {answers[-1]['decision']} (by {answers[-1]['answered_by']})")
        asked = [e for e in context.entries if e.get("kind") == "tool_result" and e.get("tool") == "ask_human"]
        if asked:
            ask_id = asked[-1]["result"]["ask_id"]
            self.waits.append({"ask_id": ask_id})
            return ModelReply(tool_calls=[ToolCall("await_message", {"ask_id": ask_id, "timeout_ms": 120_000})])
        return ModelReply(tool_calls=[ToolCall("ask_human", {"question": "Deploy now?", "kind": "approval"})])


def pending_asks(team: Team) -> list[dict]:
    response = team.op("GET", f"/teams/{team.name}/asks", params={"state": "pending"})
    assert response.status_code == 200, response.text
    return response.json()["asks"]


def answer(team: Team, ask_id: str, **body) -> dict:
    response = team.op("POST", f"/teams/{team.name}/asks/{ask_id}/answer", json=body)
    assert response.status_code == 200, response.text
    return response.json()["ask"]


def said(entries: list[dict]) -> list[str]:
    return [e.get("text") for e in entries if e["kind"] == "assistant_text"]


@asynccontextmanager
async def waiting_for_an_answer(team: Team):
    """The worker's session on an ``AskingModel``, sent "Ship the release." by the lead, once the
    model has asked and waits for the answer inside its step: yields the session and its model."""
    model = AskingModel()
    async with worker_session(team, model) as session:
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="Ship the release.")
        await until(lambda: model.waits, "the model waiting for the answer")
        yield session, model


@pytest.mark.django_db(transaction=True)
async def test_a_running_session_waits_inside_its_step_and_the_operators_answer_reaches_it(inproc_env, served):
    team = Team(inproc_env, served, "asking-live")
    async with waiting_for_an_answer(team) as (session, model):
        [ask] = await asyncio.to_thread(pending_asks, team)
        assert (ask["member"], ask["options"], ask["id"]) == ("worker", ["approve", "deny"], model.waits[0]["ask_id"])
        assert not session.idle.is_set()  # still in the turn: await_message holds the step

        answered = await asyncio.to_thread(answer, team, ask["id"], decision="approve", comment="ship it")
        assert answered["state"] == "answered"
        await until(lambda: session.idle.is_set() and said(session.entries), "the turn's end")
        assert said(session.entries) == [f"decided: approve (by {team.operator['username']})"]
        [entry] = [e for e in session.entries if (e.get("source") or {}).get("kind") == "human-answer"]
        assert (entry["source"]["ask_id"], entry["source"]["decision"]) == (ask["id"], "approve")
        # One turn: the answer entered the step that waited for it.
        turns = {e["turn_id"] for e in session.entries if e.get("turn_id")}
        assert len(turns) == 1
        history = await asyncio.to_thread(team.history, "worker")
        assert [e["id"] for e in history] == [e["id"] for e in session.entries]
        messages = {m["id"]: m for m in await asyncio.to_thread(team.messages)}
        assert messages[entry["source"]["message_id"]]["state"] == "delivered"
        assert messages[entry["source"]["message_id"]]["kind"] == "human_answer"


@pytest.mark.django_db(transaction=True)
async def test_an_answer_to_a_member_whose_session_ended_is_delivered_when_its_host_resumes_it(
    inproc_env, served
):
    team = Team(inproc_env, served, "asking-cold")
    host = Host(served.url, team.host_token, AskingModel, max_backoff=0.3)
    hosting = asyncio.create_task(host.run())
    await asyncio.wait_for(host.connected.wait(), 30)
    assert (await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d",
                                    prompt="Ship the release.")).status_code == 200
    await until(lambda: asyncio.to_thread(pending_asks, team), "the ask", timeout=60)
    [ask] = await asyncio.to_thread(pending_asks, team)
    hosting.cancel()  # the host goes, and the worker's session with it
    await asyncio.gather(hosting, return_exceptions=True)
    await until(lambda: asyncio.to_thread(lambda: {m["name"]: m["status"] for m in team.summary()["members"]}
                                          .get("worker") == "inactive"), "the worker inactive")

    await asyncio.to_thread(answer, team, ask["id"], decision="deny")
    waiting = [m for m in await asyncio.to_thread(team.messages) if m["kind"] == "human_answer"]
    assert [m["state"] for m in waiting] == ["queued"]  # no host: it waits in the mailbox

    host = Host(served.url, team.host_token, AskingModel, max_backoff=0.3)
    hosting = asyncio.create_task(host.run())
    try:
        await until(lambda: "worker" in host.sessions, "the resume", timeout=60)
        session, _ = host.sessions["worker"]
        await until(lambda: any("decided" in (t or "") for t in said(session.entries)), "the decision", timeout=60)
        history = await asyncio.to_thread(team.history, "worker")
        assert said(history)[-1] == f"decided: deny (by {team.operator['username']})"
        answers = [e for e in history if (e.get("source") or {}).get("kind") == "human-answer"]
        assert [(e["source"]["ask_id"], e["source"]["decision"]) for e in answers] == [(ask["id"], "deny")]
        delivered = [m for m in await asyncio.to_thread(team.messages) if m["kind"] == "human_answer"]
        assert [m["state"] for m in delivered] == ["delivered"]
    finally:
        hosting.cancel()
        await asyncio.gather(hosting, return_exceptions=True)


@pytest.mark.e2e
async def test_an_ask_survives_a_server_restart_and_is_answered_after_it(live_env, daphne_server):
    team = Team(live_env, daphne_server, "asking-restart")
    async with waiting_for_an_answer(team) as (session, model):
        connects = session.stats["connects"]

        await asyncio.to_thread(daphne_server.kill)  # kill -9: nothing said goodbye
        await asyncio.to_thread(daphne_server.start)
        await until(lambda: session.stats["connects"] > connects, "the session back", timeout=60)
        [ask] = await asyncio.to_thread(pending_asks, team)  # durable: it was a row before the tool answered
        assert ask["id"] == model.waits[0]["ask_id"] and ask["question"] == "Deploy now?"

        await asyncio.to_thread(answer, team, ask["id"], answer="Not before Monday.")
        await until(lambda: session.idle.is_set() and said(session.entries), "the turn's end", timeout=60)
        assert said(session.entries) == [f"decided: None (by {team.operator['username']})"]
        [entry] = [e for e in session.entries if (e.get("source") or {}).get("kind") == "human-answer"]
        assert "Not before Monday." in entry["text"]
        assert await asyncio.to_thread(pending_asks, team) == []
