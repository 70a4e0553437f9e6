"""sdk/steerboard_agents/resume.py: what a new session continues from, read from a member's history alone."""
from steerboard_agents.resume import HeldMessage, OpenTurn, resume_point


def message(entry_id: str, message_id: str, seq: int, team: str = "t") -> dict:
    return {"entry_id": entry_id, "kind": "user_message",
            "source": {"kind": "team-message", "message_id": message_id, "seq": seq, "team": team}}


def test_an_empty_history_resumes_nothing():
    point = resume_point([])
    assert (point.messages, point.team, point.prompts, point.open_turn) == ([], None, {}, None)


def test_held_messages_prompts_and_the_latest_unfinished_turn():
    m1, m2 = message("e1", "team-message-1", 1), message("e5", "team-message-2", 2, team="t2")
    prompt = {"entry_id": "e4", "kind": "prompt", "prompt_id": 7}
    history = [
        {"entry_id": "e0", "kind": "turn_start", "turn_id": "a", "cause": "message"},
        m1,
        {"entry_id": "e2", "kind": "turn_end", "turn_id": "a"},
        {"entry_id": "e3", "kind": "turn_start", "turn_id": "b", "cause": "prompt"},
        prompt,
        m2,  # steered into turn b, which never ended
        {"entry_id": "e6", "kind": "user_message", "source": {"kind": "prompt"}},  # not a team message
    ]
    point = resume_point(history)
    assert point.messages == [HeldMessage(m1, "team-message-1", 1), HeldMessage(m2, "team-message-2", 2)]
    assert point.team == "t2"
    assert point.prompts == {"7": prompt}
    assert point.open_turn == OpenTurn("b", "prompt")


def test_a_history_whose_turns_all_ended_has_no_open_turn():
    history = [
        {"kind": "turn_start", "turn_id": "a", "cause": "message"},
        {"kind": "turn_start", "turn_id": "b", "cause": "message"},
        {"kind": "turn_end", "turn_id": "b"},
        {"kind": "turn_end", "turn_id": "a"},
    ]
    assert resume_point(history).open_turn is None


def test_of_two_unfinished_turns_the_latest_is_continued():
    history = [
        {"kind": "turn_start", "turn_id": "a", "cause": "message"},
        {"kind": "turn_start", "turn_id": "b", "cause": "spawn"},
    ]
    assert resume_point(history).open_turn == OpenTurn("b", "spawn")
