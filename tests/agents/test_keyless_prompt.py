"""A human prompt sent while a member is running waits, then starts its own turn (the application
served in-process, the echo host in a thread of this process)."""
import pytest

from tests.agents.support import Team
from tests.e2e.test_keyless_cold_resume import spawn_worker, status_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_prompt_sent_while_running_starts_its_own_turn_after_that_turn(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "prompting")
    try:
        team.run_host("echo")
        spawn_worker(team)
        team.tool("lead", "send_message", target="worker", message="[hold] wait for my next message")
        team.wait_for(
            lambda: any(e["kind"] == "tool_call" for e in team.history("worker")), "the worker to wait in its turn"
        )
        assert status_of(team, "worker") == "running"
        prompt = team.prompt("worker", "a question from a human")
        assert prompt["state"] == "queued"

        team.tool("lead", "send_message", target="worker", message="carry on")
        team.wait_for(
            lambda: status_of(team, "worker") == "idle"
            and sum(e["kind"] == "turn_end" for e in team.history("worker")) == 2,
            "both turns to end",
        )
        history = team.history("worker")
        turns = []
        for entry in history:
            if entry["kind"] == "turn_start":
                turns.append([])
            turns[-1].append(entry)
        first, second = turns
        assert [e["kind"] for e in first][-1] == "turn_end"
        assert all(e["kind"] != "prompt" for e in first), "a prompt never enters a running turn"
        assert second[0]["cause"] == "prompt"
        assert [e["kind"] for e in second] == ["turn_start", "prompt", "assistant_text", "turn_end"]
        assert second[1]["text"] == "a question from a human" and second[1]["prompt_id"] == prompt["id"]
        assert second[2]["text"] == "echo 3: a question from a human"
        prompts = team.op("GET", f"/teams/{team.name}/prompts").json()["prompts"]
        team.wait_for(
            lambda: team.op("GET", f"/teams/{team.name}/prompts").json()["prompts"][0]["state"] == "completed",
            "the prompt to be completed",
        )
        assert len(prompts) == 1
    finally:
        team.stop_all()
