"""Every member as an A2A agent, driven by the official a2a-sdk client against the application
served in-process on a thread of its own (tests/support/inproc.py) and real agent sessions (a
keyless host; an echo host for the turns that wait), the host in a thread of this process
(tests/agents/support.py ``HostThread``); the callers' refusals and views need no session."""

import httpx
import pytest
from a2a.client import A2AClientError, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from tests.agents.support import Team
from tests.delegation.support import (
    artifact_texts,
    client_for,
    collect,
    http,
    message,
    state_name,
    states,
    statuses,
    task_of,
)
from tests.e2e.test_keyless_cold_resume import spawn_worker, status_of

pytestmark = [pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]


def credential(team: Team, name: str) -> str:
    return team.environment.manage_json("a2a_credential", name, "--team", team.name)["token"]


def prompt_turns(team: Team, member: str) -> list[dict]:
    return [e for e in team.history(member) if e["kind"] == "prompt"]


async def test_a_member_answers_a_delegated_task_with_the_keyless_models_answer(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "deleg")
    try:
        team.run_host("keyless")
        spawn_worker(team)
        token = credential(team, "planner")
        async with http(token) as h:
            card, client = await client_for(h, f"{served_thread.url}/a2a/deleg/worker")
            assert card.name == "deleg/worker" and card.capabilities.streaming
            assert [i.protocol_binding for i in card.supported_interfaces] == ["JSONRPC", "HTTP+JSON"]
            assert "bearer" in card.security_schemes and [s.id for s in card.skills] == ["worker"]

            events = await collect(client.send_message(message("Please review the plan.")))
            # The journey in order. The first state is the task as the send read it back: on a
            # loaded machine its turn may have ended by then; a stream that showed it waiting
            # shows it working before its end.
            seen = states(events)
            steps = iter(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"])
            assert all(state in steps for state in seen) and seen[-1] == "TASK_STATE_COMPLETED", seen
            assert seen[0] != "TASK_STATE_SUBMITTED" or "TASK_STATE_WORKING" in seen, seen
            answer = "worker: noted the message from planner@a2a."
            assert artifact_texts(events) == [answer]
            task_id, context_id = task_of(events).id, task_of(events).context_id

            again = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert state_name(again.status.state) == "TASK_STATE_COMPLETED"
            assert [p.text for p in again.artifacts[0].parts] == [answer]
            assert again.history[0].parts[0].text == "Please review the plan."

            # A follow-up in the same context is the member's next prompt, its own turn.
            follow = await collect(client.send_message(message("And the next step?", context_id)))
            assert states(follow)[-1] == "TASK_STATE_COMPLETED" and task_of(follow).context_id == context_id
            listed = await client.list_tasks(pb.ListTasksRequest(context_id=context_id))
            assert {t.id for t in listed.tasks} == {task_id, task_of(follow).id}

            # The HTTP+JSON binding serves the same tasks.
            _, rest = await client_for(h, f"{served_thread.url}/a2a/deleg/worker", binding="HTTP+JSON")
            via_rest = await rest.get_task(pb.GetTaskRequest(id=task_id))
            assert state_name(via_rest.status.state) == "TASK_STATE_COMPLETED"

        prompts = prompt_turns(team, "worker")
        assert [p["text"] for p in prompts] == ["Please review the plan.", "And the next step?"]
        listed = team.op("GET", f"/teams/{team.name}/prompts").json()["prompts"]
        assert {p["author"] for p in listed} == {"planner@a2a"}

        # The team's card routes to the Lead.
        async with http(token) as h:
            team_card, _ = await client_for(h, f"{served_thread.url}/a2a/deleg")
            assert team_card.name == "deleg"
            assert team_card.supported_interfaces[0].url.endswith("/a2a/deleg/lead/")
    finally:
        team.stop_all()


async def test_refused_callers_get_nothing(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "guarded")
    other = inproc_env.team_create("other")
    token = credential(team, "outsider")
    viewer = inproc_env.operator_create("watcher", viewer=True)["token"]
    elsewhere = inproc_env.manage_json("a2a_credential", "elsewhere", "--team", "other")["token"]
    url = f"{served_thread.url}/a2a/guarded/lead"
    async with http(token) as h:
        card, _ = await client_for(h, url)

    async def refused_by_the_sdk(bearer: str, status: int) -> None:
        async with http(bearer) as h:
            client = ClientFactory(ClientConfig(httpx_client=h, streaming=False)).create(card)
            with pytest.raises(A2AClientError, match=f"HTTP Error {status}"):
                await collect(client.send_message(message("let me in")))
            with pytest.raises(A2AClientError, match=f"HTTP Error {status}"):
                await client.get_task(pb.GetTaskRequest(id="x"))

    await refused_by_the_sdk("sba_not-a-credential", 401)  # no such credential
    await refused_by_the_sdk(other["lead"]["token"], 403)  # another team's member token
    await refused_by_the_sdk(team.lead_token, 403)  # a member token of this team: members use the tools
    await refused_by_the_sdk(viewer, 403)  # an operator who may only watch
    await refused_by_the_sdk(elsewhere, 403)  # a credential for another team
    inproc_env.manage("a2a_credential", "outsider", "--revoke")
    await refused_by_the_sdk(token, 401)  # a revoked credential

    # The refusals carry the API's error body.
    async with httpx.AsyncClient(timeout=30) as raw:

        async def post(bearer: str) -> httpx.Response:
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
            return await raw.post(url + "/", json=body, headers={"Authorization": f"Bearer {bearer}"})

        forbidden = await post(other["lead"]["token"])
        assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "FORBIDDEN"
        unknown = await post("nope")
        assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "UNAUTHENTICATED"
        assert (await raw.get(f"{served_thread.url}/a2a/guarded/nobody/.well-known/agent-card.json")).status_code == 404
    assert prompt_turns(team, "lead") == []


async def test_a_caller_sees_only_its_own_tasks(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "private")
    mine, theirs = credential(team, "mine"), credential(team, "theirs")
    url = f"{served_thread.url}/a2a/private/lead"
    async with http(mine) as h:
        _, client = await client_for(h, url, streaming=False, polling=True)
        task = task_of(await collect(client.send_message(message("a question for the lead"))))
        assert state_name(task.status.state) == "TASK_STATE_SUBMITTED"  # no host: the lead waits to be started
        assert [t.id for t in (await client.list_tasks(pb.ListTasksRequest())).tasks] == [task.id]
    async with http(theirs) as h:
        _, client = await client_for(h, url, streaming=False, polling=True)
        assert list((await client.list_tasks(pb.ListTasksRequest())).tasks) == []
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
    async with http(mine) as h:
        _, client = await client_for(h, url, streaming=False, polling=True)
        still = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert state_name(still.status.state) == "TASK_STATE_SUBMITTED"  # the other caller's cancel did nothing


async def test_cancel_withdraws_a_waiting_task_and_interrupts_a_running_one(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "cancels")
    try:
        team.run_host("echo")
        spawn_worker(team)
        token = credential(team, "canceller")
        async with http(token) as h:
            _, client = await client_for(h, f"{served_thread.url}/a2a/cancels/worker", streaming=False, polling=True)
            running = task_of(await collect(client.send_message(message("[hold] wait for my word"))))
            team.wait_for(lambda: status_of(team, "worker") == "running" and prompt_turns(team, "worker"),
                          "the held prompt's turn to run")
            now = await client.get_task(pb.GetTaskRequest(id=running.id))
            assert state_name(now.status.state) == "TASK_STATE_WORKING"

            waiting = task_of(await collect(client.send_message(message("a question that waits"))))
            assert state_name(waiting.status.state) == "TASK_STATE_SUBMITTED"
            withdrawn = await client.cancel_task(pb.CancelTaskRequest(id=waiting.id))
            assert state_name(withdrawn.status.state) == "TASK_STATE_CANCELED"

            stopped = await client.cancel_task(pb.CancelTaskRequest(id=running.id))
            assert state_name(stopped.status.state) == "TASK_STATE_CANCELED"
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(pb.CancelTaskRequest(id=running.id))

            # The withdrawn prompt never got a turn; the member takes the next task.
            _, streaming = await client_for(h, f"{served_thread.url}/a2a/cancels/worker")
            after = await collect(streaming.send_message(message("are you free?")))
            assert states(after)[-1] == "TASK_STATE_COMPLETED"
            assert artifact_texts(after)[0].endswith("are you free?")
        ends = [e for e in team.history("worker") if e["kind"] == "turn_end"]
        assert [e["reason"] for e in ends] == ["interrupted", "done"]
        assert [p["text"] for p in prompt_turns(team, "worker")] == ["[hold] wait for my word", "are you free?"]
    finally:
        team.stop_all()


class AskingModel:
    """A member that asks a person in its task's turn, waits for the answer, then says what it was."""

    def __init__(self):
        self.ask_id: str | None = None

    async def step(self, context):
        from steerboard_agents import ModelReply, ToolCall

        results = [e for e in context.entries if e.get("turn_id") == context.turn_id and e["kind"] == "tool_result"]
        if context.step == 0:
            return ModelReply(tool_calls=[ToolCall("ask_human", {"question": "Drop the old table too?",
                                                                 "options": ["yes", "no"]})])
        if context.step == 1:
            self.ask_id = results[-1]["result"]["ask_id"]
            return ModelReply(tool_calls=[ToolCall("await_message", {"ask_id": self.ask_id, "timeout_ms": 120_000})])
        answers = [e for e in context.entries if e.get("turn_id") == context.turn_id
                   and (e.get("source") or {}).get("kind") == "human-answer"]
        return ModelReply(text=f"decided: {answers[-1]['source']['decision']}")


async def test_a_stream_follows_its_task_through_input_required_to_its_answer(inproc_env, served):
    """SendStreamingMessage on a task whose member asks a person: the one stream shows WORKING,
    INPUT_REQUIRED with the question, WORKING again once the caller's message on the task
    answered it, then the answer's artifact and COMPLETED (issue 28 item 2, end to end)."""
    import asyncio

    from steerboard_agents import AgentSession

    team = Team(inproc_env, served, "asking")
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200, spawned.text
    model = AskingModel()
    session = AgentSession(served.url, await asyncio.to_thread(team.token, "worker"), model, max_backoff=0.3)
    running = asyncio.create_task(session.run())
    token = await asyncio.to_thread(credential, team, "asking-planner")
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        async with http(token) as h:
            _, client = await client_for(h, f"{served.url}/a2a/asking/worker")
            events: list = []
            asked = asyncio.Event()

            async def follow() -> None:
                async for event in client.send_message(message("Migrate the database.")):
                    events.append(event)
                    if states(events)[-1:] == ["TASK_STATE_INPUT_REQUIRED"]:
                        asked.set()

            following = asyncio.create_task(follow())
            await asyncio.wait_for(asked.wait(), 60)
            waiting = statuses(events)[-1]
            assert waiting.message.parts[0].text == "Drop the old table too?"

            _, answering = await client_for(h, f"{served.url}/a2a/asking/worker", streaming=False)
            answer = message("yes")
            answer.message.task_id = task_of(events).id
            await collect(answering.send_message(answer))
            await asyncio.wait_for(following, 60)

        # The stream reads the task as it is at each doorbell: changes closer together than one
        # read arrive as the latest of them (WORKING may be passed over), never out of order.
        seen = states(events)
        journey = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING",
                   "TASK_STATE_COMPLETED"]
        steps = iter(journey)
        assert all(state in steps for state in seen), seen  # in the journey's order
        assert seen.count("TASK_STATE_INPUT_REQUIRED") == 1 and seen[-1] == "TASK_STATE_COMPLETED", seen
        assert artifact_texts(events) == ["decided: yes"]  # the caller's answer reached the member's turn
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)
