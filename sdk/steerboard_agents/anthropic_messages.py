"""The ``anthropic`` model: Anthropic's Messages API with tools, on the official ``anthropic`` SDK.

``python -m steerboard_agents host --model anthropic:<model>`` runs a member on it; the
key and the endpoint come from ``--anthropic-api-key`` / ``--anthropic-base-url``
or the SDK's own variables ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``)
and ``ANTHROPIC_BASE_URL``.

Each step sends the whole conversation (sdk/steerboard_agents/transcript.py) under the
Messages API's rules: the team policy is ``system``; ``messages`` alternate
``user`` and ``assistant`` strictly and start with ``user``. A model reply is
an ``assistant`` message: its text block, then a ``tool_use`` block per call
(``id`` the call's id). The ``user`` message right after it starts with the
``tool_result`` blocks of those calls, in their order (``tool_use_id``;
``is_error`` for a refusal), and the inputs steered in at that step boundary
follow as text blocks of the same message; inputs in a row are one ``user``
message. The tools offered are the step's ``tool_specs`` (``name``,
``description``, ``input_schema``). The answer becomes the ``ModelReply``: its
text blocks the text, its ``tool_use`` blocks the calls, and its ``usage`` the
reply's ``Usage``: ``input_tokens`` counts every input token, so it is the
API's ``input_tokens`` (the uncached rest) plus ``cache_read_input_tokens`` and
``cache_creation_input_tokens``; ``cached_tokens`` is
``cache_read_input_tokens``.

Errors: the SDK retries what the API marks retryable (429, 529 overloaded and
other 5xx, and what ``x-should-retry`` says), honouring ``retry-after``, up to
``max_retries`` times; what still fails raises ``ModelError`` with the SDK's
words, which ends the turn with ``reason: error``.

The SDK is an optional extra (``pip install 'steerboard[anthropic]'``),
imported only when this model is chosen.
"""
from __future__ import annotations

from typing import Any

from steerboard_agents.model import ModelReply, StepContext, ToolCall, Usage
from steerboard_agents.transcript import Answer, system_prompt, transcript
from steerboard_agents.vendor import VendorModel, count, input_schema, setting

DEFAULT_MAX_TOKENS = 4096  # the API needs a bound on every answer
STARTS = "[the conversation so far]"  # a user turn before a history that starts with an answer
GO_ON = "[continue]"  # a user turn after a history that ends with an answer


def messages_for(context: StepContext) -> list[dict]:
    """The conversation as Messages API ``messages`` (see the module's docstring)."""
    messages: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})

    for item in transcript(context.entries):
        if isinstance(item, Answer):
            blocks = [{"type": "text", "text": item.text}] if item.text else []
            blocks += [{"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments} for c in item.calls]
            add("assistant", blocks)
            results = []
            for call in item.calls:
                result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.call_id, "content": call.result}
                if call.is_error:
                    result["is_error"] = True
                results.append(result)
            add("user", results)
        else:
            add("user", [{"type": "text", "text": item.text}])
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": STARTS}]})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": [{"type": "text", "text": GO_ON}]})
    return messages


def tools_for(specs: list[dict]) -> list[dict]:
    return [
        {
            "name": spec["name"],
            "description": spec.get("description") or "",
            "input_schema": input_schema(spec),
        }
        for spec in specs
    ]


def usage_of(message, model: str) -> Usage | None:
    usage = getattr(message, "usage", None)
    if usage is None:
        return None
    read = count(getattr(usage, "cache_read_input_tokens", 0))
    written = count(getattr(usage, "cache_creation_input_tokens", 0))
    return Usage(
        model=getattr(message, "model", None) or model,
        input_tokens=count(getattr(usage, "input_tokens", 0)) + read + written,
        output_tokens=count(getattr(usage, "output_tokens", 0)),
        cached_tokens=read,
    )


def reply_from(message, model: str) -> ModelReply:
    """A Messages API answer as a ModelReply, with its usage."""
    texts, calls = [], []
    for block in getattr(message, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text" and block.text:
            texts.append(block.text)
        elif kind == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else {"input": block.input}
            calls.append(ToolCall(block.name, arguments))
    return ModelReply(text="\n\n".join(texts) or None, tool_calls=calls, usage=usage_of(message, model))


class AnthropicMessagesModel(VendorModel):
    """One member's model on the Messages API (``client``: an ``anthropic.AsyncAnthropic``)."""

    EXTRA = "anthropic"
    TITLE = "Anthropic"
    CLIENT = "AsyncAnthropic"
    ERROR = "AnthropicError"
    BASE_URL = "ANTHROPIC_BASE_URL"

    def __init__(self, member: str, *, model: str, client, max_tokens: int | None = DEFAULT_MAX_TOKENS):
        super().__init__(member, model=model, client=client, max_tokens=max_tokens or DEFAULT_MAX_TOKENS)

    @classmethod
    def credentials(cls, api_key: str | None) -> dict[str, str | None]:
        key = setting(api_key, "ANTHROPIC_API_KEY")
        token = None if key else setting(None, "ANTHROPIC_AUTH_TOKEN")
        if not key and not token:
            raise ValueError("anthropic models need an API key: set ANTHROPIC_API_KEY")
        return {"api_key": key, "auth_token": token}

    async def request(self, context: StepContext):
        options: dict[str, Any] = {}
        if context.tool_specs:
            options["tools"] = tools_for(context.tool_specs)
        return await self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            system=system_prompt(context),
            messages=messages_for(context),
            **options,
        )

    def reply(self, answer) -> ModelReply:
        return reply_from(answer, self.model)


sdk = AnthropicMessagesModel.sdk  # the SDK package, or a ValueError naming the extra
factory = AnthropicMessagesModel.factory  # the model factory for ``anthropic:<model>``
