"""Every member's activity (issue 28 item 3: mailbox/members/activity.py), derived from real sessions over
a real websocket against the application served in-process on a thread of its own
(tests/support/inproc.py): each state as list_agents, the operator REST roster and the
dashboard's snapshot all show it, the same in all three."""
import asyncio
import json
import time
from datetime import datetime

import httpx
import pytest

from steerboard_agents import ModelError, ModelReply, StepContext, ToolCall
from tests.agents.support import Team, worker_session
from tests.frontend.conftest import AgentSession as WireSession
from tests.frontend.conftest import ws_open

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(team: Team, server=None) -> dict:
    server = server or team.server
    response = httpx.get(f"{server.url}/teams/{team.name}/snapshot.json", timeout=30,
                         headers={"Authorization": f"Token {team.operator['token']}"})
    assert response.status_code == 200, response.text
    return response.json()


def activities(team: Team) -> dict[str, dict]:
    """Each member's activity from list_agents, checked against the REST roster and the snapshot."""
    listed = team.tool("lead", "list_agents")
    assert listed.status_code == 200, listed.text
    found = {a["name"]: a["activity"] for a in listed.json()["agents"]}
    rest = {m["name"]: m["activity"] for m in team.summary()["members"]}
    lanes = {m["name"]: m["activity"] for m in snapshot(team)["members"]}
    for other in (rest, lanes):
        # Read a moment apart: the same state and detail; since may only have moved on.
        assert {n: (a["state"], a["detail"]) for n, a in other.items()} == {
            n: (a["state"], a["detail"]) for n, a in found.items()}, (found, other)
    return found


def activity_is(team: Team, member: str, state: str, detail=None) -> dict:
    """Wait (a frame is handled asynchronously) until the member shows this state (and detail),
    the same in all three views. Views read while the state moves on may differ: read again."""
    def check():
        try:
            found = activities(team)[member]
        except AssertionError:
            return None
        if found["state"] == state and (detail is None or found["detail"] == detail):
            return found
        return None

    return team.wait_for(check, f"{member} {state} {detail or ''}", timeout=30)


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_each_state_a_session_reports_is_its_activity_with_its_reason_and_since(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "activity-wire")
    assert team.tool("lead", "spawn_teammate", name="worker", description="d", prompt="").status_code == 200
    # Spawned, no host: nobody runs it yet.
    found = activity_is(team, "worker", "inactive")
    assert found["detail"] == "provisioning: waiting for its host to start it"
    assert activities(team)["lead"]["state"] == "inactive"

    worker = WireSession(served_thread, team.token("worker"), "idle")
    try:
        idle = activity_is(team, "worker", "idle")
        assert idle["detail"] is None

        worker.status("running")  # a turn is open, nothing recorded in it yet
        started = activity_is(team, "worker", "working", "thinking")
        assert at(started["since"]) >= at(idle["since"])
        worker.entry("turn_start", turn_id="t1", step=0, cause="steer")
        activity_is(team, "worker", "working", "thinking")

        # A tool_call entry without its tool_result: working on that tool, since the call.
        worker.entry("tool_call", turn_id="t1", step=0, call_id="c1", tool="team_task_list", arguments={})
        calling = activity_is(team, "worker", "working", "team_task_list")
        assert at(calling["since"]) >= at(started["since"])
        worker.entry("tool_result", turn_id="t1", step=0, call_id="c1", tool="team_task_list", result={"tasks": []})
        activity_is(team, "worker", "working", "thinking")

        # await_message and wait_agent open: waiting for a peer, and whom.
        worker.entry("tool_call", turn_id="t1", step=1, call_id="c2", tool="await_message",
                     arguments={"sender": "lead"}, local=True)
        activity_is(team, "worker", "waiting_peer", "await_message from lead")
        worker.entry("tool_result", turn_id="t1", step=1, call_id="c2", tool="await_message",
                     result={"timed_out": True, "arrived": []})
        worker.entry("tool_call", turn_id="t1", step=2, call_id="c3", tool="await_message", arguments={}, local=True)
        activity_is(team, "worker", "waiting_peer", "await_message from any member")
        worker.entry("tool_result", turn_id="t1", step=2, call_id="c3", tool="await_message",
                     result={"timed_out": True, "arrived": []})
        worker.entry("tool_call", turn_id="t1", step=3, call_id="c4", tool="wait_agent", arguments={"timeout_ms": 10000})
        activity_is(team, "worker", "waiting_peer", "wait_agent: any teammate's change")
        worker.entry("tool_result", turn_id="t1", step=3, call_id="c4", tool="wait_agent",
                     result={"timed_out": True, "no_progress": None})

        # The model provider refused: the turn ends with its error, and that is the reason shown.
        error = "openai: RateLimitError: Error code: 429 - quota exceeded"
        worker.entry("turn_end", turn_id="t1", step=3, reason="error", error=error)
        worker.status("idle")
        failed = activity_is(team, "worker", "failed", error)
        assert team.summary()["members"][1]["status"] == "idle"  # the status says the session; activity why

        # A turn that ends well: idle again.
        worker.status("running")
        worker.entry("turn_start", turn_id="t2", step=0, cause="prompt")
        worker.entry("turn_end", turn_id="t2", step=0, reason="done")
        worker.status("idle")
        done = activity_is(team, "worker", "idle")
        assert at(done["since"]) >= at(failed["since"])
    finally:
        worker.close()
    activity_is(team, "worker", "inactive")

    retired = team.op("POST", f"/teams/{team.name}/members/worker/retire")
    assert retired.status_code == 200, retired.text
    activity_is(team, "worker", "retired")


def test_a_pending_ask_human_is_waiting_human_with_its_question_until_an_operator_answers(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "activity-ask")
    assert team.tool("lead", "spawn_teammate", name="worker", description="d", prompt="").status_code == 200
    worker = WireSession(served_thread, team.token("worker"), "idle")
    try:
        worker.status("running")
        worker.entry("turn_start", turn_id="t1", step=0, cause="steer")
        asked = team.tool("worker", "ask_human", question="Deploy to production?", kind="approval")
        assert asked.status_code == 200, asked.text
        # Asked and still working on its step: working. Asked and waiting (here in await_message,
        # as docs/agents.md shows): waiting for a person, the question as the reason.
        activity_is(team, "worker", "working", "thinking")
        worker.entry("tool_call", turn_id="t1", step=1, call_id="c1", tool="await_message", arguments={}, local=True)
        found = activity_is(team, "worker", "waiting_human", "Deploy to production?")
        assert activities(team)["lead"]["state"] != "waiting_human"
        answered = team.op("POST", f"/teams/{team.name}/asks/{asked.json()['ask_id']}/answer", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text
        after = activity_is(team, "worker", "waiting_peer", "await_message from any member")
        assert at(after["since"]) >= at(found["since"]) or after["since"] == found["since"]
    finally:
        worker.close()


def test_a_start_the_host_reports_failed_is_the_members_failed_activity_with_the_hosts_error(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "activity-host")
    host = ws_open(served_thread.ws_url + "/ws/host/", team.host_token)
    try:
        assert team.tool("lead", "spawn_teammate", name="worker", description="d", prompt="go").status_code == 200
        deadline = time.monotonic() + 20
        while True:
            frame = json.loads(host.recv(timeout=max(0.1, deadline - time.monotonic())))
            if frame["type"] == "start" and frame["member"] == "worker":
                break
        host.send(json.dumps({"type": "start_failed", "member": "worker", "error": "no such model: gpt-9"}))
        activity_is(team, "worker", "failed", "no such model: gpt-9")
    finally:
        host.close()


class ScriptedModel:
    """The SDK's own entries: a step held at a gate (thinking), an await_message for the Lead,
    then the provider's refusal."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.steps = 0

    async def step(self, context: StepContext) -> ModelReply:
        self.steps += 1
        if self.steps == 1:
            await self.gate.wait()
            return ModelReply(tool_calls=[ToolCall("await_message", {"sender": "lead"})])
        raise ModelError("anthropic: OverloadedError: 529 overloaded")


async def test_the_sdks_entries_read_as_thinking_waiting_for_the_lead_then_failed(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "activity-sdk")
    model = ScriptedModel()
    async with worker_session(team, model) as session:
        await asyncio.to_thread(activity_is, team, "worker", "idle")
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="start")
        await asyncio.to_thread(activity_is, team, "worker", "working", "thinking")
        model.gate.set()
        await asyncio.to_thread(activity_is, team, "worker", "waiting_peer", "await_message from lead")
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="here you are")
        await asyncio.to_thread(activity_is, team, "worker", "failed", "anthropic: OverloadedError: 529 overloaded")


def test_a_turn_open_with_nothing_recorded_for_stall_after_is_stalled_and_needs_attention(
    inproc_env, served_thread, settings, clock
):
    # A stall threshold of a second and a half, passed on the test's clock (not slept through).
    settings.STEERBOARD = {**settings.STEERBOARD, "STALL_AFTER": 1.5}
    server = served_thread
    team = Team(inproc_env, server, "activity-stall")
    assert team.tool("lead", "spawn_teammate", name="worker", description="d", prompt="").status_code == 200
    assert team.tool("lead", "spawn_teammate", name="waiter", description="d", prompt="").status_code == 200
    worker = WireSession(server, team.token("worker"), "running")
    waiter = WireSession(server, team.token("waiter"), "running")
    try:
        worker.entry("turn_start", turn_id="t1", step=0, cause="steer")
        worker.entry("tool_call", turn_id="t1", step=0, call_id="c1", tool="send_message",
                      arguments={"target": "lead", "message": "hi"})
        waiter.entry("turn_start", turn_id="w1", step=0, cause="steer")
        waiter.entry("tool_call", turn_id="w1", step=0, call_id="w1", tool="await_message", arguments={}, local=True)

        def stalled():
            doing = {m["name"]: m["activity"] for m in snapshot(team, server)["members"]}
            return doing if doing["worker"]["state"] == "stalled" else None

        clock.shift(1.4)
        assert stalled() is None, "not before STALL_AFTER"
        clock.shift(0.2)
        doing = team.wait_for(stalled, "worker stalled", timeout=20)
        assert doing["worker"]["detail"].startswith("last entry tool_call send_message, ")
        assert doing["worker"]["detail"].endswith(" s ago")
        # Waiting for a peer as long is not a stall: whom it waits for is the reason.
        assert doing["waiter"] == {**doing["waiter"], "state": "waiting_peer",
                                   "detail": "await_message from any member"}

        listed = {a["name"]: a["activity"]["state"] for a in team.tool("lead", "list_agents").json()["agents"]}
        assert listed["worker"] == "stalled"
        items = snapshot(team, server)["attention"]["items"]
        stalled_items = [i for i in items if i["kind"] == "stalled"]
        assert [i["member"] for i in stalled_items] == ["worker"]
        assert stalled_items[0]["error"].startswith("last entry tool_call send_message")
        assert stalled_items[0]["seconds"] >= 1.5

        # An entry is a sign of life: working again, out of Needs attention.
        worker.entry("tool_result", turn_id="t1", step=0, call_id="c1", tool="send_message", result={})
        after = snapshot(team, server)
        assert next(m for m in after["members"] if m["name"] == "worker")["activity"]["state"] == "working"
        assert not [i for i in after["attention"]["items"] if i["kind"] == "stalled"]
        # The page is told when to read again: when the worker would stall next.
        assert after["attention"]["due_at"] is not None
    finally:
        worker.close()
        waiter.close()
