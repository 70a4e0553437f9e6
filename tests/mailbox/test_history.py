"""mailbox/engine/history.py: a member's history read back, and its turns.

The three readers of turns (the dashboard's timeline, the server's questions
about one turn, the session's cold-resume) follow one rule
(sdk/steerboard_protocol/turns.py): on one history they must place every entry alike.
"""
import pytest

from steerboard_agents.resume import resume_point
from frontend.selectors import timeline_build
from mailbox.engine import history
from mailbox.models import EntryKind, HistoryEntry
from teams.services import member_spawn, team_create

pytestmark = pytest.mark.django_db

# Named and unnamed turns mixed, as sessions of different SDKs may write them.
ENTRIES = [
    ("turn_start", {"turn_id": "a", "cause": "message"}),
    ("assistant_text", {"turn_id": "a", "text": "one"}),
    ("user_message", {"text": "steered, no turn id"}),
    ("turn_end", {"turn_id": "a", "reason": "done"}),
    ("assistant_text", {"text": "after the end, no turn id"}),
    ("turn_start", {}),
    ("turn_start", {}),  # nothing in the turn yet: the same turn
    ("prompt", {"prompt_id": "p1", "text": "human"}),
    ("tool_call", {"call_id": "c1", "tool": "team_task_list"}),
    ("tool_result", {"call_id": "c1", "tool": "team_task_list", "result": {}}),
    ("turn_end", {"reason": "done"}),
    ("prompt", {"prompt_id": "p2", "text": "again"}),
    ("tool_result", {"call_id": "c2", "tool": "team_task_list", "result": {}}),
    ("turn_start", {"turn_id": "b", "cause": "prompt"}),
    ("tool_call", {"turn_id": "b", "call_id": "c3", "tool": "team_task_list"}),
]


def _history():
    _, lead, _, _ = team_create(name="history")
    member = member_spawn(lead=lead, name="worker", description="d", prompt="")
    for i, (kind, data) in enumerate(ENTRIES):
        HistoryEntry.objects.create(
            member=member, entry_id=f"e{i}", kind=kind, prompt_id=data.get("prompt_id"),
            data={"id": f"e{i}", "kind": kind, **data},
        )
    return member, list(HistoryEntry.objects.filter(member=member).order_by("id"))


def test_the_timeline_the_trace_and_cold_resume_place_every_entry_in_the_same_turn():
    member, rows = _history()
    turns, _ = timeline_build(rows, status="running")
    timeline = {e["id"]: t["turn_id"] for t in turns for s in t["steps"] for e in s["entries"]}
    assert [t["turn_id"] for t in turns] == ["a", "turn-at-e4", "turn-at-e5", "turn-at-e11", "b"]

    assert {row.entry_id: history.turn_of(row) for row in rows} == timeline

    entries, _ = history.history_page(member=member)
    open_turn = resume_point(entries).open_turn
    assert open_turn.turn_id == "b" == turns[-1]["turn_id"]
    assert [e["id"] for e in open_turn.entries] == [e for e, t in timeline.items() if t == "b"]


def test_a_prompts_turn_is_what_follows_it_up_to_its_end():
    member, rows = _history()
    first = history.prompt_turn_start(member_id=member.pk, prompt_id="p1")
    after = history.turn_after(first, kinds=[EntryKind.TOOL_CALL, EntryKind.TOOL_RESULT, EntryKind.TURN_END])
    assert [row.entry_id for row in after] == ["e8", "e9", "e10"]
    # A turn left unfinished ends where the next turn starts.
    second = history.prompt_turn_start(member_id=member.pk, prompt_id="p2")
    assert [row.entry_id for row in history.turn_after(second, kinds=[EntryKind.TOOL_RESULT, EntryKind.TOOL_CALL])] == ["e12"]
