"""Kill the daphne process (kill -9, by a crash point) in the middle of the keyless
profile and start it again on the same port and database: the sessions and the
host reconnect, nothing is lost or duplicated, and the Lead still ends with
TEAM_WORKFLOW_OK.

The kill comes at a crash point (mailbox/plumbing/faults.py), not when the test happens to
see a task on the board: the workflow finishes fast enough that a poll could see
task-2 only after the end, and then the restart was not in the middle at all."""
import pytest

from tests.agents.support import Team
from tests.agents.test_keyless_profile import (
    assert_nothing_lost_or_duplicated,
    assert_researcher_steered_into_implementer_turn,
    assert_tasks_completed_before_final_text,
)
from tests.support.live import DaphneProcess

pytestmark = pytest.mark.e2e


def workflow_done_in_database(live_env, team: str) -> bool:
    """Team.workflow_ok, read from the database while no server runs."""
    rows = live_env.query(
        "SELECT COUNT(*) FROM mailbox_historyentry h JOIN teams_member m ON h.member_id = m.id "
        f"JOIN teams_team t ON m.team_id = t.id WHERE t.name = '{team}' AND m.name = 'lead' "
        "AND h.kind = 'assistant_text' AND CAST(h.data AS TEXT) LIKE '%TEAM_WORKFLOW_OK%'"
    )
    return rows[0][0] > 0


@pytest.mark.parametrize(
    "crash_at",
    [
        # daphne dies after committing task-1 (task-2) and before answering the Lead,
        # whose retry is answered from its idempotency key.
        "after_task_commit:1",
        "after_task_commit:2",
        # The 2nd send is the researcher's "[task-1 claimed]" (after the implementer's
        # "[implementer ready]"; the spawn prompts are stored with the spawn, not sent):
        # daphne dies after committing it and before answering, so the researcher's
        # retry must not send it twice.
        "after_queued_commit:2",
        # The 20th entry is stored but never acknowledged, so its session must resend it
        # after the restart, and it folds.
        "after_entry:20",
    ],
    ids=["after-task-1-created", "after-task-2-created", "after-queued-commit-2", "after-entry-20"],
)
def test_profile_survives_a_server_crash(live_env, crash_at):
    first = DaphneProcess(live_env, STEERBOARD_CRASH_AT=crash_at).start()
    team = Team(live_env, first, "crash")
    again = None
    try:
        team.start_host("keyless")
        team.prompt("lead", "Run the team workflow.")
        team.wait_for(lambda: first.proc.poll() is not None, f"daphne to crash at {crash_at}")
        assert first.proc.returncode == 137, first.log()[-2000:]
        if crash_at.startswith("after_task_commit"):
            assert not workflow_done_in_database(live_env, "crash")  # the kill came mid-workflow
        again = DaphneProcess(live_env, port=first.port).start()
        team.server = again
        team.wait_for(team.workflow_ok, "TEAM_WORKFLOW_OK after the crash", timeout=120)
        team.wait_for(team.settled, "every member idle with every message delivered", timeout=60)
        histories = {m: team.history(m) for m in ("lead", "implementer", "researcher")}
        assert_nothing_lost_or_duplicated(team, histories)
        assert_researcher_steered_into_implementer_turn(histories["implementer"])
        assert_tasks_completed_before_final_text(histories["lead"])
        final = [e for e in histories["lead"] if e["kind"] == "assistant_text" and "TEAM_WORKFLOW_OK" in e["text"]]
        assert len(final) == 1
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
