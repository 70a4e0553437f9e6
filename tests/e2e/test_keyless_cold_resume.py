"""Cold-resume: a member whose session ended is started again by the host when a
message arrives, and continues from its durable history."""
import itertools

import pytest

from tests.agents.support import Team

# One daphne for the module (tests/conftest.py): the hosts die here, never the server; each test
# has a team of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.shared_server]
_teams = itertools.count(1)


@pytest.fixture
def team(live_env, daphne_server):
    team = Team(live_env, daphne_server, f"resume{next(_teams)}")
    yield team
    team.stop_all()


def status_of(team: Team, member: str) -> str:
    return next(m["status"] for m in team.summary()["members"] if m["name"] == member)


def texts(entries):
    return [e["text"] for e in entries if e["kind"] == "assistant_text"]


def spawn_worker(team: Team) -> None:
    response = team.tool("lead", "spawn_teammate", name="worker", description="echoes", prompt="")
    assert response.status_code == 200, response.text
    team.wait_for(lambda: status_of(team, "worker") == "idle", "the host to provision the worker")


def test_an_ended_session_is_resumed_by_a_message_and_continues_from_its_history(team):
    host = team.start_host("echo")
    spawn_worker(team)
    assert team.tool("lead", "send_message", target="worker", message="first").status_code == 200
    team.wait_for(lambda: "echo 1: first" in texts(team.history("worker")) and status_of(team, "worker") == "idle",
                  "the first answer")

    host.kill()  # the host and its sessions are gone without a goodbye
    team.wait_for(lambda: status_of(team, "worker") == "inactive", "the worker to go inactive")
    team.start_host("echo")
    sent = team.tool("lead", "send_message", target="worker", message="second")
    # accepted (the new host was asked to resume the worker) or queued (it asks when it connects)
    assert sent.status_code == 200, sent.text
    team.wait_for(lambda: status_of(team, "worker") == "idle" and len(texts(team.history("worker"))) == 2,
                  "the resumed worker to answer")

    history = team.history("worker")
    # "echo 2": the resumed session counted the first message, which it only knows from the history.
    assert texts(history) == ["echo 1: first", "echo 2: second"]
    assert [e["kind"] for e in history].count("turn_start") == 2
    assert len({e["id"] for e in history}) == len(history)
    assert all(m["state"] == "delivered" for m in team.messages())


def test_a_session_that_died_in_a_turn_continues_that_turn(team):
    host = team.start_host("echo")
    spawn_worker(team)
    team.tool("lead", "send_message", target="worker", message="[hold] wait for my next message")
    waiting = lambda: any(e["kind"] == "tool_call" and e["tool"] == "await_message" for e in team.history("worker"))
    team.wait_for(waiting, "the worker to wait inside its turn")
    assert status_of(team, "worker") == "running"

    host.kill()
    team.wait_for(lambda: status_of(team, "worker") == "inactive", "the worker to go inactive")
    team.start_host("echo")
    team.tool("lead", "send_message", target="worker", message="here it is")
    team.wait_for(lambda: status_of(team, "worker") == "idle" and texts(team.history("worker")), "the turn to end")

    history = team.history("worker")
    assert [e["kind"] for e in history] == [
        "turn_start",
        "user_message",
        "tool_call",
        "tool_result",  # reported by the resumed session, which ran the pending call again
        "user_message",
        "assistant_text",
        "turn_end",
    ]
    assert len({e["turn_id"] for e in history}) == 1, "one turn, continued"
    assert [e.get("resumed", False) for e in history] == [False, False, False, True, False, False, False]
    assert [e["step"] for e in history if e["kind"] == "user_message"] == [0, 1]
    assert texts(history) == ["echo 2: here it is"]


@pytest.mark.parametrize("created", [1, 2], ids=["after-task-1", "after-task-2"])
def test_a_new_host_with_the_state_file_resumes_the_keyless_team_mid_run(team, tmp_path, created):
    """The host dies mid-run (sessions and all); a new host with its state file runs the
    teammates again, each continues its history, and the Lead still gets TEAM_WORKFLOW_OK.

    The host kills itself (os._exit, as kill -9) when the answer to the workflow's
    first or second team_task_create arrives, before the session records it: a
    known point mid-run, however fast the team works (a poll for the task on the
    board sometimes saw the workflow already finished)."""
    from tests.agents.test_keyless_profile import (
        assert_nothing_lost_or_duplicated,
        assert_researcher_steered_into_implementer_turn,
        assert_tasks_completed_before_final_text,
    )

    state = tmp_path / "host-state.json"
    host = team.start_host("keyless", state=state, env={"STEERBOARD_AGENTS_CRASH_AT": f"team_task_create:{created}"})
    team.prompt("lead", "Run the team workflow.")
    assert host.proc.wait(120) == 137, host.log()[-3000:]
    assert [t["id"] for t in team.summary()["tasks"]] == [f"task-{n}" for n in range(1, created + 1)]
    assert not team.workflow_ok()
    team.wait_for(
        lambda: {m["name"]: m["status"] for m in team.summary()["members"]}.keys() >= {"researcher", "implementer"}
        and all(m["status"] == "inactive" for m in team.summary()["members"] if m["name"] != "lead"),
        "the teammates to go inactive",
    )
    team.start_host("keyless", state=state)
    team.wait_for(team.workflow_ok, "TEAM_WORKFLOW_OK after the host came back", timeout=120)
    team.wait_for(team.settled, "every member idle with every message delivered", timeout=60)
    histories = {m: team.history(m) for m in ("lead", "implementer", "researcher")}
    assert_nothing_lost_or_duplicated(team, histories)
    assert_researcher_steered_into_implementer_turn(histories["implementer"])
    assert_tasks_completed_before_final_text(histories["lead"])
    assert state.stat().st_mode & 0o077 == 0, "the state file holds tokens: owner only"
