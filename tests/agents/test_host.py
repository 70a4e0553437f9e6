"""The host against the application served in-process: provisioning, and one session per member."""
import asyncio

import pytest

from steerboard_agents import EchoModel, Host
from tests.agents.support import Team
from tests.agents.test_session_folding import until

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_host_provisions_a_spawned_teammate_and_a_repeated_start_changes_nothing(inproc_env, served):
    team = Team(inproc_env, served, "hosting")
    host = Host(served.url, team.host_token, EchoModel, max_backoff=0.3)
    running = asyncio.create_task(host.run())
    try:
        await asyncio.wait_for(host.connected.wait(), 30)
        spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name="worker", description="d", prompt="p")
        assert spawned.status_code == 200
        await until(lambda: "worker" in host.sessions and host.sessions["worker"][0].connected.is_set(), "the session")
        assert host.starts == [{"member": "worker", "reason": "provision"}]
        session, task = host.sessions["worker"]

        token = await asyncio.to_thread(team.token, "worker")
        answer = host.start({"type": "start", "member": "worker", "token": token, "reason": "resume"})
        assert answer == {"type": "started", "member": "worker"}
        assert host.sessions["worker"] == (session, task), "still the one session"

        def said() -> list[str]:
            return [e["text"] for e in session.entries if e["kind"] == "assistant_text"]

        # The spawn prompt is the teammate's first turn.
        await until(lambda: said() == ["echo 1: p"] and session.idle.is_set(), "the spawn prompt's turn")
        first = next(e for e in session.entries if e["kind"] == "user_message")
        assert (first["text"], first["source"]["sender"]) == ("p", "lead")
        await asyncio.to_thread(team.tool, "lead", "send_message", target="worker", message="hi")
        await until(lambda: len(said()) == 2 and session.idle.is_set(), "a second turn")
        assert said() == ["echo 1: p", "echo 2: hi"]
        summary = await asyncio.to_thread(team.summary)
        assert {m["name"]: m["status"] for m in summary["members"]} == {"lead": "inactive", "worker": "idle"}
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert task.done(), "stopping the host stops its sessions"
