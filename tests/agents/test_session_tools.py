"""AgentSession calls the Team tools over its own websocket, against the application
served in-process: no ``POST /api/v1/tools/`` while it is connected (the server
records every request it answers), an answer lost with the socket is repeated over REST
without doing anything twice, and a server that does not know tool frames gets
every call over REST."""
import asyncio
import contextlib
import json

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

from steerboard_agents import AgentSession, ModelReply, ServerClient, StepContext, ToolCall
from tests.agents.support import Team
from tests.agents.test_session_folding import until

pytestmark = pytest.mark.django_db(transaction=True)


class Script:
    """A plugged-in model: the tool calls of each step of a turn, then a final text."""

    def __init__(self, *steps: list[ToolCall]):
        self.steps = steps

    async def step(self, context: StepContext) -> ModelReply:
        if context.step < len(self.steps):
            return ModelReply(tool_calls=list(self.steps[context.step]))
        return ModelReply(text="done")


WORKER_SCRIPT = (
    [
        ToolCall("team_task_create", {"subject": "s", "description": "d"}),
        ToolCall("team_task_list", {}),
        ToolCall("list_agents", {}),
    ],
    [ToolCall("send_message", {"target": "lead", "message": "hi"}), ToolCall("wait_agent", {"timeout_ms": 10_000})],
)


def tool_posts(server, tool: str = "") -> int:
    """Tool calls the server answered over REST (each recorded as its answer starts)."""
    return sum(1 for method, path, _ in server.requests if method == "POST" and path.startswith(f"/api/v1/tools/{tool}"))


def results(entries: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for entry in entries:
        if entry["kind"] == "tool_result":
            out.setdefault(entry["tool"], []).append(entry)
    return out


async def run_turn(team: Team, session: AgentSession, member: str) -> list[dict]:
    """Prompt the member (operator REST, not a tool call) and wait until the turn has ended."""
    ends = sum(e["kind"] == "turn_end" for e in session.entries)
    await asyncio.to_thread(team.prompt, member, "go")
    await until(lambda: sum(e["kind"] == "turn_end" for e in session.entries) > ends and session.idle.is_set(),
                "the turn", timeout=60)
    return await asyncio.to_thread(team.history, member)


async def test_a_connected_sessions_tool_calls_go_over_its_websocket(inproc_env, served):
    team = Team(inproc_env, served, "socket-tools")
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200
    session = AgentSession(served.url, await asyncio.to_thread(team.token, "worker"), Script(*WORKER_SCRIPT),
                           max_backoff=0.3)
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        before = tool_posts(served)
        assert before >= 1, "the server recorded the REST spawn_teammate"

        history = await run_turn(team, session, "worker")
        done = results(history)
        assert sorted(done) == ["list_agents", "send_message", "team_task_create", "team_task_list", "wait_agent"]
        assert all("result" in r for rs in done.values() for r in rs), done
        assert done["send_message"][0]["result"]["idempotent_replay"] is False
        assert tool_posts(served) == before, "no tool call of the session went over REST"
        assert session.client.transport is not None and session.client.transport.ready

        # A dropped socket: the next connection carries the calls again.
        connects = session.stats["connects"]
        session.drop_connection()
        await until(lambda: session.stats["connects"] > connects, "the reconnect")
        history = await run_turn(team, session, "worker")
        assert [len(r) for r in results(history).values()] == [2, 2, 2, 2, 2]
        assert tool_posts(served) == before
        messages = await asyncio.to_thread(team.messages)
        assert [m["content"] for m in messages] == ["hi", "hi"]  # one per turn, none twice
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)


async def test_an_answer_lost_with_the_socket_is_repeated_safely(inproc_env, served):
    """The server did the call, its tool_result never reached the session (the socket dropped
    in between): the call is repeated over REST and answered from the state it left."""
    team = Team(inproc_env, served, "lost-answers")
    model = Script(
        [ToolCall("spawn_teammate", {"name": "worker", "description": "d", "prompt": ""})],
        [ToolCall("send_message", {"target": "worker", "message": "hello"})],
    )
    session = AgentSession(served.url, team.lead_token, model, max_backoff=0.3)
    lost: list[str] = []
    on_frame = session._on_frame

    async def losing(frame: dict) -> None:
        """Lose the first answer to spawn_teammate and to send_message, with the socket."""
        result = frame.get("result") or {}
        what = next((k for k in ("member", "message_id") if k in result), None)
        if frame.get("type") == "tool_result" and what and what not in lost:
            lost.append(what)
            session.drop_connection()
            return
        await on_frame(frame)

    session._on_frame = losing
    before = {tool: tool_posts(served, tool) for tool in ("spawn_teammate", "send_message")}
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        history = await run_turn(team, session, "lead")
        assert lost == ["member", "message_id"]
        assert session.stats["connects"] >= 3

        done = results(history)
        [spawn], [send] = done["spawn_teammate"], done["send_message"]
        assert spawn["result"]["member"]["name"] == "worker", spawn  # TEAM_NAME_TAKEN, recognised in the roster
        assert send["result"]["idempotent_replay"] is True, send  # answered from its idempotency key
        summary = await asyncio.to_thread(team.summary)
        assert sorted(m["name"] for m in summary["members"]) == ["lead", "worker"]
        messages = await asyncio.to_thread(team.messages)
        assert [(m["sender"], m["target"], m["content"]) for m in messages] == [("lead", "worker", "hello")]
        # Each first went out as a frame; only its repetition went over REST.
        assert tool_posts(served, "spawn_teammate") == before["spawn_teammate"] + 1
        assert tool_posts(served, "send_message") == before["send_message"] + 1
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)


VALIDATION = "type: Input tag 'tool' found using 'type' does not match any of the expected tags: 'hello', 'status', 'entry'"


@contextlib.asynccontextmanager
async def server_without_tool_frames(upstream: str):
    """/ws/agent/ as a server from before tool frames answers them: every other frame goes
    to the real server; a ``tool`` frame gets the error frame its validation gave."""
    refused: list[dict] = []

    async def relay(client):
        headers = {"Authorization": client.request.headers["Authorization"]}
        async with connect(upstream + "/ws/agent/", additional_headers=headers, max_queue=None) as server:
            async def down():
                async for raw in server:
                    await client.send(raw)

            async def up():
                async for raw in client:
                    frame = json.loads(raw)
                    if frame.get("type") == "tool":
                        refused.append(frame)
                        await client.send(json.dumps({"type": "error",
                                                      "error": {"code": "VALIDATION_ERROR", "message": VALIDATION}}))
                    else:
                        await server.send(raw)

            pumps = [asyncio.create_task(down()), asyncio.create_task(up())]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)

    async with serve(relay, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", refused


async def test_a_server_without_tool_frames_gets_the_calls_over_rest(inproc_env, served):
    team = Team(inproc_env, served, "old-server")
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200
    token = await asyncio.to_thread(team.token, "worker")
    async with server_without_tool_frames(served.ws_url) as (relay_url, refused):
        session = AgentSession(relay_url, token, Script(*WORKER_SCRIPT), max_backoff=0.3)
        await session.client.aclose()
        session.client = ServerClient(served.url, token, max_backoff=0.3)  # REST straight to the server
        running = asyncio.create_task(session.run())
        try:
            await asyncio.wait_for(session.connected.wait(), 30)
            before = tool_posts(served)
            history = await run_turn(team, session, "worker")
            done = results(history)
            assert sorted(done) == ["list_agents", "send_message", "team_task_create", "team_task_list", "wait_agent"]
            assert all("result" in r for rs in done.values() for r in rs), done
            assert tool_posts(served) == before + 5, "every call went over REST"
            assert session.client.transport is None
            assert [f["id"].startswith("probe-") for f in refused] == [True] * session.stats["connects"]
        finally:
            await session.stop()
            await asyncio.gather(running, return_exceptions=True)


async def test_a_turns_entries_share_round_trips_but_nothing_leaves_before_they_are_held(inproc_env, served, monkeypatch):
    """The session sends a turn's entries back to back, without waiting for each ack (they share
    the server's commits; those added together go in one frame: an ``entries`` frame, or the
    tool frame that comes next), yet when the server runs a tool call every entry the session
    added before it is stored, and the turn ends (status idle) only once its last entry is."""
    from mailbox.transports import tools as server_tools

    team = Team(inproc_env, served, "settled-entries")
    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="")
    assert spawned.status_code == 200
    session = AgentSession(served.url, await asyncio.to_thread(team.token, "worker"), Script(*WORKER_SCRIPT),
                           max_backoff=0.3)
    outbox = session._outbox
    added_at_call: list[set[str]] = []  # the session's entries when it made each Team tool call
    stored_at_run: list[set[str]] = []  # the worker's stored history when the server ran each
    most_in_flight = 0
    sent_together: list[int] = []  # entries per frame (entries frames, and tool frames that carried some)
    call, send, carry = session.client.tool, outbox._send, outbox.carry
    server_call = server_tools.tool_call

    async def observed_call(name, arguments, **kwargs):
        added_at_call.append({e["id"] for e in session.entries})
        return await call(name, arguments, **kwargs)

    async def observed_send(frame):
        nonlocal most_in_flight
        sent = await send(frame)
        sent_together.append(len(frame["entries"]) if frame["type"] == "entries" else 1)
        most_in_flight = max(most_in_flight, len(outbox._inflight))
        return sent

    def observed_carry():
        carried = carry()
        if carried:
            sent_together.append(len(carried))
        return carried

    async def observed_run(*, member, **kwargs):
        if member.name == "worker" and session.connected.is_set():  # not the probe before hello
            stored_at_run.append({e["id"] for e in await asyncio.to_thread(team.history, "worker")})
        return await server_call(member=member, **kwargs)

    session.client.tool, outbox._send, outbox.carry = observed_call, observed_send, observed_carry
    monkeypatch.setattr(server_tools, "tool_call", observed_run)
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        history = await run_turn(team, session, "worker")
        assert len(added_at_call) == len(stored_at_run) == 5, (added_at_call, stored_at_run)  # five Team tool calls
        for added, stored in zip(added_at_call, stored_at_run):
            assert added <= stored, added - stored  # each ran after every entry before it was held
        assert most_in_flight >= 2 or max(sent_together) >= 2, "the turn's entries went out without waiting for each other's acks"
        assert max(sent_together) >= 2, sent_together  # entries added together went in one frame
        assert sum(sent_together) == len(session.entries), (sent_together, len(session.entries))  # each once
        assert len(outbox) == 0  # idle: the turn's last entry (turn_end) is held
        assert [e["kind"] for e in history][-1] == "turn_end"
        assert {e["id"] for e in history} == {e["id"] for e in session.entries}
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)
