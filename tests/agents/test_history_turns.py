"""sdk/steerboard_protocol/turns.py: the one rule for which turn each history entry is in."""
import pytest

from steerboard_protocol.turns import HistoryTurns


def placed(*entries: tuple) -> list[tuple[str, bool]]:
    """Place (kind, turn_id or None, id) entries in order; answer (turn, opens) for each."""
    turns = HistoryTurns()
    return [tuple(turns.place(kind, turn_id, entry_id)) for kind, turn_id, entry_id in entries]


def test_an_entry_that_names_its_turn_is_in_it_and_opens_it_after_another_turn():
    assert placed(
        ("turn_start", "a", "e0"), ("assistant_text", "a", "e1"), ("turn_end", "a", "e2"),
        ("turn_start", "b", "e3"), ("user_message", "b", "e4"),
    ) == [("a", True), ("a", False), ("a", False), ("b", True), ("b", False)]


def test_an_entry_that_names_none_stays_in_the_current_turn_until_it_ended():
    assert placed(
        ("turn_start", None, "e0"), ("assistant_text", None, "e1"), ("turn_end", None, "e2"),
        ("assistant_text", None, "e3"),
    ) == [("turn-at-e0", True), ("turn-at-e0", False), ("turn-at-e0", False), ("turn-at-e3", True)]


@pytest.mark.parametrize("opener", ["turn_start", "prompt"])
def test_a_start_or_a_prompt_opens_a_turn_only_once_the_current_one_holds_more_than_its_start(opener):
    assert placed(("turn_start", None, "e0"), (opener, None, "e1"), ("tool_call", None, "e2"), (opener, None, "e3")) == [
        ("turn-at-e0", True), ("turn-at-e0", False), ("turn-at-e0", False), ("turn-at-e3", True),
    ]


def test_an_unnamed_entry_after_a_named_turn_is_in_that_turn():
    assert placed(("turn_start", "a", "e0"), ("user_message", None, "e1")) == [("a", True), ("a", False)]


def open_turn(*entries: tuple):
    turns = HistoryTurns()
    for kind, turn_id, entry_id in entries:
        turns.place(kind, turn_id, entry_id, {"id": entry_id})
    found = turns.open_turn()
    return None if found is None else (found[0], found[1]["id"])


def test_the_open_turn_is_the_latest_started_without_its_end():
    assert open_turn() is None
    assert open_turn(("turn_start", "a", "e0"), ("turn_start", "b", "e1"), ("turn_end", "a", "e2")) == ("b", "e1")
    assert open_turn(("turn_start", "a", "e0"), ("turn_start", "b", "e1"), ("turn_end", "b", "e2")) == ("a", "e0")
    assert open_turn(("turn_start", "a", "e0"), ("turn_end", "a", "e1")) is None
    # Started again after its end: open again, from the later start.
    assert open_turn(("turn_start", "a", "e0"), ("turn_end", "a", "e1"), ("turn_start", "a", "e2")) == ("a", "e2")
    # Without turn ids, the start's implied id.
    assert open_turn(("turn_start", None, "e0"), ("tool_call", None, "e1")) == ("turn-at-e0", "e0")


def test_a_turn_the_history_holds_no_start_of_is_not_open():
    assert open_turn(("user_message", "a", "e0"), ("assistant_text", "a", "e1")) is None
