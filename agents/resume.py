"""Cold-resume: what a member's durable history says its new session continues from.

``resume_point(entries)`` reads the history (GET /api/v1/session/history, oldest
first) and returns, without any I/O, what the session restores: the team
messages the conversation already holds (so folding knows them and the inbox
knows where ``seq`` stands), the prompts that already had their turn (so a
prompt pushed again is not run again), and the turn the history left
unfinished, if any (its ``turn_start`` has no ``turn_end``; the latest such
turn is the one to continue). agents/session.py applies it; agents/turns.py
continues the open turn.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple


class HeldMessage(NamedTuple):
    """A team message already in the conversation, as ``Inbox.restored`` takes it."""

    entry: dict
    message_id: str
    seq: int


@dataclass(frozen=True)
class OpenTurn:
    """A turn the history started and never ended."""

    turn_id: str
    cause: str | None


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
    open_turns: OrderedDict[str, dict] = OrderedDict()
    for entry in entries:
        kind = entry.get("kind")
        source = entry.get("source") or {}
        if kind == "user_message" and source.get("kind") == "team-message":
            messages.append(HeldMessage(entry, source["message_id"], int(source.get("seq") or 0)))
            team = source.get("team", team)
        if kind == "prompt" and entry.get("prompt_id") is not None:
            prompts[str(entry["prompt_id"])] = entry
        if kind == "turn_start":
            open_turns[entry.get("turn_id")] = entry
        elif kind == "turn_end":
            open_turns.pop(entry.get("turn_id"), None)
    open_turn = None
    if open_turns:
        turn_id, start = next(reversed(open_turns.items()))
        open_turn = OpenTurn(turn_id, start.get("cause"))
    return ResumePoint(messages=messages, team=team, prompts=prompts, open_turn=open_turn)
