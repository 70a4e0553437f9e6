"""The conversation a chat model is shown: a member's history read as inputs and answers.

One reading of the history entries (docs/agents.md, "History entries") for
every chat-model adapter (sdk/steerboard_agents/openai_chat.py, sdk/steerboard_agents/anthropic_messages.py);
each adapter only spells the result in its vendor's message format.

- An input is a ``user_message`` (a team message, with its sender and id) or
  a ``prompt`` (a person's). Inputs stay where the history put them: a message
  steered in at a step boundary comes after the answer and tool results of the
  step before, so the model reads it at that point of the turn.
- An answer is one model reply: the ``assistant_text`` and ``tool_call``
  entries of one step of one turn, text first, then the calls in order. Each
  call carries its result: the first ``tool_result`` with its ``call_id``,
  wherever the history holds it (a cold-resumed session records the result of
  a call its predecessor made, after a restart); a call whose result the
  history never got is answered ``NO_RESULT``, because both vendors refuse a
  call left without one. Results whose call is not in the history are left out.
- ``turn_start`` and ``turn_end`` only close an answer.

So a history that was resumed reads exactly as the same history written in
one go. Call ids are shown to the vendor as ``wire_id(call_id)``: the ids the
session makes (32 hex digits) as they are, others (another SDK's) made safe
for both vendors' id rules.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from steerboard_agents.model import INPUT_KINDS, StepContext

NO_RESULT = {"code": "NO_RESULT", "message": "The history holds no result for this call: the session stopped before it finished."}
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass
class Input:
    """A team message or a person's prompt, as the text the model reads."""

    text: str


@dataclass
class Call:
    call_id: str  # the id the vendor is shown (wire_id of the entry's call_id)
    name: str
    arguments: dict
    result: str  # the tool_result as JSON text: its ``result``, or ``{"error": ...}``
    is_error: bool = False


@dataclass
class Answer:
    """One model reply: its text and its tool calls, each with its result."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.calls)


def wire_id(call_id: str) -> str:
    """A call id both vendors take (letters, digits, ``_`` and ``-``, at most 40): the
    session's own ids unchanged, any other one replaced by a digest of it."""
    call_id = str(call_id)
    if _SAFE_ID.match(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:32]


def input_text(entry: dict) -> str:
    """What the model reads for an input entry: who it is from, then the text."""
    text = entry.get("text") or ""
    if entry.get("kind") == "prompt":
        author = entry.get("author") or "a person"
        return f"[prompt from {author}]\n{text}"
    source = entry.get("source") or {}
    if source.get("kind") == "human-answer":  # a person's answer to this member's ask_human
        by = source.get("answered_by") or "nobody (it expired)"
        return f"[answer to your ask {source.get('ask_id')} from {by}: {source.get('decision') or 'in words'}]\n{text}"
    sender = source.get("sender") or "someone"
    message_id = source.get("message_id")
    head = f"[message {message_id} from {sender}]" if message_id else f"[message from {sender}]"
    return f"{head}\n{text}"


def _result_text(entry: dict | None) -> tuple[str, bool]:
    if entry is None:
        return json.dumps({"error": NO_RESULT}), True
    if "error" in entry:
        return json.dumps({"error": entry["error"]}, ensure_ascii=False), True
    return json.dumps(entry.get("result"), ensure_ascii=False), False


def transcript(entries: list[dict]) -> list[Input | Answer]:
    """The history as inputs and answers, oldest first (see the module's docstring)."""
    results: dict[str, dict] = {}
    for entry in entries:
        if entry.get("kind") == "tool_result" and entry.get("call_id") is not None:
            results.setdefault(str(entry["call_id"]), entry)
    out: list[Input | Answer] = []
    answer: Answer | None = None
    answer_key = None
    seen_calls: set[str] = set()
    for entry in entries:
        kind = entry.get("kind")
        if kind in ("assistant_text", "tool_call"):
            key = (entry.get("turn_id"), entry.get("step"))
            if answer is None or key != answer_key:
                answer, answer_key = Answer(), key
                out.append(answer)
            if kind == "assistant_text":
                text = entry.get("text") or ""
                if text:
                    answer.text = f"{answer.text}\n\n{text}" if answer.text else text
                continue
            call_id = str(entry.get("call_id"))
            if call_id in seen_calls:
                continue
            seen_calls.add(call_id)
            arguments = entry.get("arguments")
            result, is_error = _result_text(results.get(call_id))
            answer.calls.append(
                Call(
                    call_id=wire_id(call_id),
                    name=str(entry.get("tool") or ""),
                    arguments=arguments if isinstance(arguments, dict) else {},
                    result=result,
                    is_error=is_error,
                )
            )
        elif kind in INPUT_KINDS:
            answer = None
            out.append(Input(input_text(entry)))
        elif kind in ("turn_start", "turn_end"):
            answer = None
    return [item for item in out if not isinstance(item, Answer) or item]


def system_prompt(context: StepContext) -> str:
    """Who the model speaks for, how its inputs read, and the team policy."""
    team = f" of the team {context.team}" if context.team else ""
    lines = [
        f"You are {context.member or 'a member'}, a member{team} on Steerboard, working with your teammates "
        "through the tools you are given.",
        "Messages from teammates arrive as user turns headed `[message <id> from <sender>]`, a person's prompt "
        "as `[prompt from <author>]`; answer a teammate with send_message (reply_to=<id> keeps the thread). "
        "Your turn ends when you answer without calling a tool.",
    ]
    if context.instructions:
        lines += ["", context.instructions.strip()]
    return "\n".join(lines)
