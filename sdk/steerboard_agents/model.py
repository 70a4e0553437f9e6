"""The model interface: given the conversation, return text and/or tool calls.

A model is any object with an async ``step(context) -> ModelReply`` method. The
session calls it once per step of a turn; tool calls in the reply run in order,
then the step boundary comes (steered messages enter), then the next step. A
reply without tool calls ends the turn.

Two models ship here: ``echo`` (answers what it was told, counting its inputs
across the whole history) and, in ``steerboard_agents.keyless``, the keyless scripted
Agent Teams profile. Neither needs a key or a network. The adapters for real
models are ``steerboard_agents.openai_chat`` and ``steerboard_agents.anthropic_messages``
(what both share: ``steerboard_agents.vendor``).

A reply may carry the vendor's ``usage`` (tokens in and out, the model's
name); the turn runner records it on the first entry the reply produced. A
model that cannot answer raises: ``ModelError`` for a failure it has already
described (a vendor's refusal after its retries), anything else for a bug;
either ends the turn with ``reason: error``, never the session.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

INPUT_KINDS = ("user_message", "prompt")


@dataclass
class ToolCall:
    """A call the model asks for: one of the ten Team tools, or a session-local tool."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class Usage:
    """What one model reply cost, as the vendor reported it.

    ``input_tokens`` counts every input token of the request, the cached ones
    included; ``cached_tokens`` says how many of them the vendor read from its
    prompt cache (billed at its cache price); ``model`` is the name the vendor
    answered with. Recorded on history entries as docs/protocol.md says.
    """

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def as_entry(self) -> dict[str, Any]:
        """The entry's ``usage`` field, within what docs/protocol.md allows (a name of 1-200
        characters, counts from 0, the cached ones among the input ones): a server that
        reported odd numbers must not get the entry refused and the turn held up."""
        input_tokens = max(0, int(self.input_tokens or 0))
        return {
            "model": (str(self.model or "").strip() or "unknown")[:200],
            "input_tokens": input_tokens,
            "output_tokens": max(0, int(self.output_tokens or 0)),
            "cached_tokens": min(max(0, int(self.cached_tokens or 0)), input_tokens),
        }


@dataclass
class ModelReply:
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None  # recorded with the first entry this reply produces


class ModelError(Exception):
    """The model could not answer this step, and the message says why in words fit for the
    history (``turn_end.error``): a vendor's refusal, after the retries it allows."""


@dataclass
class StepContext:
    """What the model sees at one step.

    ``entries`` is the whole conversation, oldest first, in the history-entry
    format of docs/agents.md (the current turn included). ``turn_id`` and
    ``step`` say where the session is; ``tools`` lists the tool names it may call,
    ``tool_specs`` the same tools as ``{"name", "description", "input_schema"}``
    (the Team tools' from ``GET /api/v1/tools``, ``await_message``'s from
    sdk/steerboard_agents/turns.py) for a model that offers them to an LLM; ``instructions`` is
    the team policy the server serves, when it serves one.
    """

    member: str
    entries: list[dict]
    turn_id: str
    step: int
    tools: list[str]
    instructions: str | None = None  # the team policy (GET /api/v1/tools/policy), for a model's system prompt
    tool_specs: list[dict] = field(default_factory=list)
    team: str | None = None

    # --- helpers models tend to want ----------------------------------------------------
    def turn_entries(self) -> list[dict]:
        return [e for e in self.entries if e.get("turn_id") == self.turn_id]

    def inputs(self) -> list[dict]:
        """Every user message and prompt in the conversation."""
        return [e for e in self.entries if e.get("kind") in INPUT_KINDS]

    def messages_from(self, sender: str) -> list[dict]:
        return [
            e
            for e in self.entries
            if e.get("kind") == "user_message" and (e.get("source") or {}).get("sender") == sender
        ]

    def calls(self, tool: str | None = None) -> list[dict]:
        """Finished tool calls: {"tool", "arguments", "call_id", "result"|"error", "index"}."""
        results = {e["call_id"]: e for e in self.entries if e.get("kind") == "tool_result"}
        out = []
        for index, e in enumerate(self.entries):
            if e.get("kind") != "tool_call" or (tool and e.get("tool") != tool):
                continue
            done = results.get(e["call_id"])
            if done is None:
                continue
            item = {"tool": e["tool"], "arguments": e.get("arguments", {}), "call_id": e["call_id"], "index": index}
            if "error" in done:
                item["error"] = done["error"]
            else:
                item["result"] = done.get("result")
            out.append(item)
        return out


@runtime_checkable
class Model(Protocol):
    async def step(self, context: StepContext) -> ModelReply: ...


class EchoModel:
    """Answers each new input with ``echo N: <text>``; N counts inputs over the whole history.

    An input containing ``[hold]`` makes it wait (the local ``await_message``
    tool) for the next message before answering, so a turn can be kept running.
    """

    def __init__(self, member: str = ""):
        self.member = member

    async def step(self, context: StepContext) -> ModelReply:
        turn = context.turn_entries()
        last_output = max(
            (i for i, e in enumerate(turn) if e.get("kind") in ("assistant_text", "tool_call")), default=-1
        )
        fresh = [e for e in turn[last_output + 1 :] if e.get("kind") in INPUT_KINDS]
        if any("[hold]" in (e.get("text") or "") for e in fresh):
            return ModelReply(tool_calls=[ToolCall("await_message", {})])
        if not fresh:
            fresh = [e for e in turn if e.get("kind") in INPUT_KINDS][-1:]
        count = len(context.inputs())
        said = " | ".join((e.get("text") or "").strip() for e in fresh)
        return ModelReply(text=f"echo {count}: {said}")
