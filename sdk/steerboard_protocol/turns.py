"""Which turn each entry of a member's session history belongs to: the one rule.

Every reader of a history that needs turns places its entries with
``HistoryTurns`` (oldest first): the session's cold-resume (sdk/steerboard_agents/resume.py),
the dashboard's timeline (frontend/selectors.py), a message's trace and a
delegated task's turn (mailbox/engine/history.py). The rule:

- an entry that names a ``turn_id`` is in that turn; it opens the turn when the
  entry before it was in another one;
- an entry that names none is in the current turn, but opens a new one (called
  ``turn-at-<its entry id>``) when there is no current turn, when the current
  turn has ended, or when it is a ``turn_start`` or a human ``prompt`` and the
  current turn already holds more than its ``turn_start``;
- a ``turn_end`` ends the turn it is in.

A turn is *open* while the history holds its ``turn_start`` and no ``turn_end``
after it; of several, the latest started is the one a new session continues.

Django-free: the server passes its rows' fields, the SDK the wire's dicts.
"""
from __future__ import annotations

from typing import Any, NamedTuple

TURN_START, TURN_END, PROMPT = "turn_start", "turn_end", "prompt"


class Placed(NamedTuple):
    turn_id: str
    opens: bool  # this entry opened the turn (the one before it was in another)


def named_turn(data: Any) -> str | None:
    """The ``turn_id`` an entry names, if it names one (a string)."""
    value = data.get("turn_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


class HistoryTurns:
    def __init__(self) -> None:
        self.turn_id: str | None = None  # the current turn
        self._ended = False  # the current turn's turn_end was placed
        self._content = False  # the current turn holds more than its turn_start
        self._starts: dict[str, Any] = {}  # turn id -> its turn_start, in the order they came
        self._ended_turns: set[str] = set()

    def place(self, kind: str, turn_id: str | None, entry_id: Any, entry: Any = None) -> Placed:
        """Place the next entry: ``kind``, the ``turn_id`` it names (or None), its entry
        id (the wire's ``id``); ``entry`` is kept as the turn's start when it is a ``turn_start``."""
        if turn_id is not None:
            opens = self.turn_id != turn_id
        else:
            opens = self.turn_id is None or self._ended or (kind in (TURN_START, PROMPT) and self._content)
        if opens:
            self.turn_id = turn_id or f"turn-at-{entry_id}"
            self._ended = self._content = False
        current = self.turn_id
        if kind == TURN_START:
            self._starts.pop(current, None)
            self._starts[current] = entry
            self._ended_turns.discard(current)
        else:
            self._content = True
        if kind == TURN_END:
            self._ended = True
            self._ended_turns.add(current)
        return Placed(current, opens)

    def place_entry(self, entry: dict) -> Placed:
        """Place a history entry as the wire has it (a dict with ``kind``, ``turn_id`` and its ``id``)."""
        return self.place(entry.get("kind") or "", named_turn(entry), entry.get("id"), entry)

    def open_turn(self) -> tuple[str, Any] | None:
        """The latest turn started and not ended, with its ``turn_start``; None when every turn ended."""
        for turn_id in reversed(self._starts):
            if turn_id not in self._ended_turns:
                return turn_id, self._starts[turn_id]
        return None
