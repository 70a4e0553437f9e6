"""Kill the daphne process in the middle of the keyless profile and start it again
on the same port and database: the sessions and the host reconnect, nothing is
lost or duplicated, and the Lead still ends with TEAM_WORKFLOW_OK."""
import time

import pytest

from tests.agents.support import Team
from tests.e2e.test_keyless_profile import (
    assert_nothing_lost_or_duplicated,
    assert_researcher_steered_into_implementer_turn,
    assert_tasks_completed_before_final_text,
)
from tests.support.live import DaphneProcess

pytestmark = pytest.mark.e2e


def task_exists(team: Team, task_id: str) -> bool:
    return any(t["id"] == task_id for t in team.summary()["tasks"])


@pytest.mark.parametrize("task_id", ["task-1", "task-2"], ids=["after-task-1-created", "after-task-2-created"])
def test_profile_survives_a_server_restart(live_env, daphne_server, task_id):
    team = Team(live_env, daphne_server, "restart")
    again = None
    try:
        team.start_host("keyless")
        team.prompt("lead", "Run the team workflow.")
        team.wait_for(lambda: task_exists(team, task_id), f"{task_id} on the board", timeout=120)
        assert not team.workflow_ok()
        daphne_server.kill()
        time.sleep(1.0)
        again = DaphneProcess(live_env, port=daphne_server.port).start()
        team.server = again
        team.wait_for(team.workflow_ok, "TEAM_WORKFLOW_OK after the restart", timeout=120)
        team.wait_for(team.settled, "every member idle with every message delivered", timeout=60)
        histories = {m: team.history(m) for m in ("lead", "implementer", "researcher")}
        assert_nothing_lost_or_duplicated(team, histories)
        assert_researcher_steered_into_implementer_turn(histories["implementer"])
        assert_tasks_completed_before_final_text(histories["lead"])
        final = [e for e in histories["lead"] if e["kind"] == "assistant_text" and "TEAM_WORKFLOW_OK" in e["text"]]
        assert len(final) == 1
    finally:
        team.stop_all()
        if again is not None:
            again.stop()


@pytest.mark.parametrize(
    "crash_at",
    # The 3rd message is the researcher's "[task-1 claimed]": daphne dies after committing it and
    # before answering, so the researcher's retry must not send it twice. The 20th entry is stored
    # but never acknowledged, so its session must resend it after the restart, and it folds.
    ["after_queued_commit:3", "after_entry:20"],
)
def test_profile_survives_a_server_crash_between_commit_and_answer(live_env, crash_at):
    first = DaphneProcess(live_env, STEERBOARD_CRASH_AT=crash_at).start()
    team = Team(live_env, first, "crash")
    again = None
    try:
        team.start_host("keyless")
        team.prompt("lead", "Run the team workflow.")
        team.wait_for(lambda: first.proc.poll() is not None, f"daphne to crash at {crash_at}")
        assert first.proc.returncode == 137, first.log()[-2000:]
        again = DaphneProcess(live_env, port=first.port).start()
        team.server = again
        team.wait_for(team.workflow_ok, "TEAM_WORKFLOW_OK after the crash", timeout=120)
        team.wait_for(team.settled, "every member idle with every message delivered", timeout=60)
        histories = {m: team.history(m) for m in ("lead", "implementer", "researcher")}
        assert_nothing_lost_or_duplicated(team, histories)
        assert_researcher_steered_into_implementer_turn(histories["implementer"])
        assert_tasks_completed_before_final_text(histories["lead"])
        if crash_at.startswith("after_queued_commit"):
            replayed = [
                e for e in histories["researcher"]
                if e["kind"] == "tool_result" and e["tool"] == "send_message" and e["result"]["idempotent_replay"]
            ]
            assert len(replayed) == 1, "the retried send must have been answered from its idempotency key"
    finally:
        team.stop_all()
        first.stop()
        if again is not None:
            again.stop()
