"""The keyless Agent Teams profile, end to end: the application served in-process on a thread of
its own, the real host (the CLI's ``Host`` with the keyless model, tests/agents/support.py
``HostThread``) running every member's session. tests/e2e/test_keyless_cold_resume.py runs it
again with a host process that dies mid-run."""
import pytest

from tests.agents.support import Team, normalise, snapshot_compare

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(inproc_env, served_thread):
    team = Team(inproc_env, served_thread, "keyless")
    yield team
    team.stop_all()


def run_profile(team: Team) -> None:
    team.run_host("keyless")
    team.prompt("lead", "Run the team workflow.")
    team.wait_for(team.workflow_ok, "the Lead's TEAM_WORKFLOW_OK")
    team.wait_for(team.settled, "every member idle with every message delivered")


def turns_of(entries):
    turns = {}
    for entry in entries:
        turns.setdefault(entry["turn_id"], []).append(entry)
    return turns


def assert_researcher_steered_into_implementer_turn(implementer):
    """The researcher's note entered the next step of the implementer's running turn."""
    notes = [e for e in implementer if e["kind"] == "user_message" and e["source"]["sender"] == "researcher"]
    assert notes, "the implementer never heard from the researcher"
    for note in notes:
        turn = turns_of(implementer)[note["turn_id"]]
        start = turn[0]
        assert start["kind"] == "turn_start" and start["cause"] == "steer"
        first_input = next(e for e in turn if e["kind"] == "user_message")
        assert first_input["source"]["sender"] == "lead", "the note must not have started this turn"
        before = [e for e in turn if e["kind"] == "tool_call" and e["step"] == note["step"] - 1]
        after = [e for e in turn if e["kind"] == "tool_call" and e["step"] == note["step"]]
        assert before and after, "the note must sit between two steps of the turn"
        position = turn.index(note)
        assert turn.index(before[-1]) < position < turn.index(after[0])
        assert all(e["kind"] != "turn_end" for e in turn[:position])


def assert_tasks_completed_before_final_text(lead):
    final = next(i for i, e in enumerate(lead) if e["kind"] == "assistant_text" and "TEAM_WORKFLOW_OK" in e["text"])
    boards = [
        (i, e) for i, e in enumerate(lead[:final]) if e["kind"] == "tool_result" and e.get("tool") == "team_task_list"
    ]
    assert boards, "the Lead never checked the board"
    tasks = boards[-1][1]["result"]["tasks"]
    assert [(t["id"], t["status"]) for t in tasks] == [("task-1", "completed"), ("task-2", "completed")]
    assert any(e["kind"] == "tool_result" and e.get("tool") == "list_agents" for e in lead[boards[-1][0]:final])
    assert any(e["kind"] == "tool_result" and e.get("tool") == "wait_agent" for e in lead[:final])


def assert_nothing_lost_or_duplicated(team: Team, histories: dict):
    messages = team.messages()
    assert all(m["state"] == "delivered" for m in messages), messages
    for member, entries in histories.items():
        ids = [e["id"] for e in entries]
        assert len(ids) == len(set(ids)), f"{member}: an entry twice"
        held = [e["source"]["message_id"] for e in entries if e["kind"] == "user_message"]
        assert len(held) == len(set(held)), f"{member}: a message twice"
        addressed = sorted(m["id"] for m in messages if m["target"] == member)
        assert sorted(held) == addressed, f"{member}: its history and its mail disagree"
        for turn in turns_of(entries).values():
            kinds = [e["kind"] for e in turn]
            assert kinds[0] == "turn_start" and kinds[-1] == "turn_end" and kinds.count("turn_end") == 1
    # Each teammate's first turn is its spawn prompt, from the Lead.
    for member in ("implementer", "researcher"):
        first = next(e for e in histories[member] if e["kind"] == "user_message")
        spawn_prompt = next(m for m in messages if m["id"] == first["source"]["message_id"])
        assert (spawn_prompt["kind"], spawn_prompt["sender"], spawn_prompt["seq"]) == ("spawn_prompt", "lead", 1)
    # Then five: implementer<->researcher four times, implementer->lead.
    assert len(messages) == 2 + 5
    tasks = team.summary()["tasks"]
    assert [(t["id"], t["status"], t["owner"]) for t in tasks] == [
        ("task-1", "completed", "researcher"),
        ("task-2", "completed", "implementer"),
    ]
    assert tasks[1]["blocked_by"] == ["task-1"]


def test_keyless_profile_matches_its_snapshot(team):
    run_profile(team)
    histories = {m: team.history(m) for m in ("lead", "implementer", "researcher")}
    assert_nothing_lost_or_duplicated(team, histories)
    assert_researcher_steered_into_implementer_turn(histories["implementer"])
    assert_tasks_completed_before_final_text(histories["lead"])
    snapshot_compare("keyless_profile.json", normalise(histories, team.name))
