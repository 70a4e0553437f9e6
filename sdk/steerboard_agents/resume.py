"""Cold-resume: what a member's durable history says its new session continues from.

``resume_point(entries)`` reads the history (GET /api/v1/session/history, oldest
first) and returns, without any I/O, what the session restores: the team
messages the conversation already holds (so folding knows them and the inbox
knows where ``seq`` stands), the prompts that already had their turn (so a
prompt pushed again is not run again), and the turn the history left
unfinished, if any, with its entries (sdk/steerboard_protocol/turns.py says which
entries are in which turn, and which turn is open). sdk/steerboard_agents/session.py applies
it; sdk/steerboard_agents/turns.py continues the open turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from steerboard_protocol.turns import HistoryTurns


class HeldMessage(NamedTuple):
    """A team message already in the conversation, as ``Inbox.restored`` takes it."""

    entry: dict
    message_id: str
    seq: int


@dataclass(frozen=True)
class OpenTurn:
    """A turn the history started and never ended, with its entries (oldest first)."""

    turn_id: str
    cause: str | None
    entries: tuple[dict, ...] = field(default=(), compare=False)


# The sources of an entry that holds a team message: a member's, or a person's answer to an ask.
MESSAGE_SOURCES = ("team-message", "human-answer")


@dataclass(frozen=True)
class ResumePoint:
    messages: list[HeldMessage] = field(default_factory=list)
    team: str | None = None  # the team the latest held message names
    prompts: dict[str, dict] = field(default_factory=dict)  # prompt id -> its prompt entry
    open_turn: OpenTurn | None = None


def resume_point(entries: list[dict]) -> ResumePoint:
    messages: list[HeldMessage] = []
    team: str | None = None
    prompts: dict[str, dict] = {}
    turns = HistoryTurns()  # the turn rule the dashboard and the server use too
    placed: list[tuple[str, dict]] = []
    for entry in entries:
        kind = entry.get("kind")
        source = entry.get("source") or {}
        if kind == "user_message" and source.get("kind") in MESSAGE_SOURCES:
            messages.append(HeldMessage(entry, source["message_id"], int(source.get("seq") or 0)))
            team = source.get("team", team)
        if kind == "prompt" and entry.get("prompt_id") is not None:
            prompts[str(entry["prompt_id"])] = entry
        placed.append((turns.place_entry(entry).turn_id, entry))
    open_turn = None
    found = turns.open_turn()
    if found is not None:
        turn_id, start = found
        in_turn = tuple(entry for placed_in, entry in placed if placed_in == turn_id)
        open_turn = OpenTurn(turn_id, start.get("cause"), in_turn)
    return ResumePoint(messages=messages, team=team, prompts=prompts, open_turn=open_turn)
