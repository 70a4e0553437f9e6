"""An A2A task is the database's, not a process's: started through daphne A, it is
streamed to COMPLETED by a client of daphne B (PostgreSQL + Redis, as
tests/e2e/test_multiprocess.py runs them, in the PostgreSQL run)."""
import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from tests.agents.support import Team
from tests.delegation.support import (
    artifact_texts,
    client_for,
    collect,
    http,
    message,
    state_name,
    states,
    task_of,
)
from tests.e2e.test_keyless_cold_resume import spawn_worker, status_of
from tests.support.live import DaphneProcess, LiveEnvironment, postgres_run_only, start_together

pytestmark = [
    pytest.mark.e2e,
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


async def test_a_task_started_through_a_completes_while_its_client_streams_from_b(scale_env):
    a, b = start_together(DaphneProcess(scale_env), DaphneProcess(scale_env))
    team = Team(scale_env, a, "across")
    try:
        team.start_host("echo")  # the host and the worker's session are on A
        spawn_worker(team)
        token = scale_env.manage_json("a2a_credential", "far-agent", "--team", "across")["token"]
        async with http(token) as h:
            _, on_a = await client_for(h, f"{a.url}/a2a/across/worker", streaming=False, polling=True)
            held = message("[hold] until the Lead says go")
            held.metadata.update({"steerboard_tool_results": True})  # the answer carries the turn's tool results
            started = task_of(await collect(on_a.send_message(held)))
            team.wait_for(lambda: status_of(team, "worker") == "running", "the prompt's turn to run on A")

            card, on_b = await client_for(h, f"{b.url}/a2a/across/worker")
            assert card.supported_interfaces[0].url.startswith(b.url)
            stream = on_b.subscribe(pb.SubscribeToTaskRequest(id=started.id))
            first = await anext(stream)
            assert state_name(first.task.status.state) == "TASK_STATE_WORKING"
            # The Lead's message (through A) lets the held turn answer.
            assert team.tool("lead", "send_message", target="worker", message="go").status_code == 200
            rest = await collect(stream)
        assert states(rest)[-1] == "TASK_STATE_COMPLETED"
        assert artifact_texts(rest) and artifact_texts(rest)[0].startswith("echo ")
        assert "go" in artifact_texts(rest)[0]
        parts = next(e.artifact_update.artifact.parts for e in rest if e.HasField("artifact_update"))
        tools = [json_format.MessageToDict(p.data) for p in parts if p.HasField("data")]
        assert [t["tool"] for t in tools] == ["await_message"]
    finally:
        team.stop_all()
        a.stop()
        b.stop()
