"""The ``openai`` model: OpenAI's chat completions with tools, on the official ``openai`` SDK.

The same API is spoken by OpenAI and by every compatible server: vLLM, Ollama,
llama.cpp's server, LM Studio, DeepSeek. ``python -m steerboard_agents host --model
openai:<model>`` runs a member on it; the endpoint and the key come from
``--openai-base-url`` / ``--openai-api-key`` or the SDK's own variables
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.

Each step sends the whole conversation (sdk/steerboard_agents/transcript.py) as chat
messages: the team policy as the ``system`` message; each input as a ``user``
message (consecutive inputs in one, for servers whose chat templates insist
that roles alternate); each model reply as an ``assistant`` message with its
``tool_calls``, each followed by its ``tool`` message (``tool_call_id`` the
call's id), as the API requires. The tools offered are the step's
``tool_specs`` as ``{"type": "function", "function": {name, description,
parameters}}``. The answer's first choice becomes the ``ModelReply``: its
``content`` the text, its function ``tool_calls`` the calls (arguments that are
not a JSON object reach the tool as ``{"arguments_not_json": <the text>}``, so
the model reads the refusal and can try again), and its ``usage`` the reply's
``Usage`` (``prompt_tokens``, ``completion_tokens``, and the cached tokens from
``prompt_tokens_details.cached_tokens``, or DeepSeek's
``prompt_cache_hit_tokens``).

Errors: the SDK retries what the API marks retryable (429 and 5xx, and what a
server's ``x-should-retry`` says), honouring ``retry-after``, up to
``max_retries`` times; what still fails raises ``ModelError`` with the SDK's
words, which ends the turn with ``reason: error``.

The SDK is an optional extra (``pip install 'steerboard[openai]'``), imported
only when this model is chosen.
"""
from __future__ import annotations

import json
from typing import Any

from steerboard_agents.model import ModelError, ModelReply, StepContext, ToolCall, Usage
from steerboard_agents.transcript import Answer, system_prompt, transcript
from steerboard_agents.vendor import VendorModel, count, input_schema, setting


def messages_for(context: StepContext) -> list[dict]:
    """The conversation as chat-completions messages (see the module's docstring)."""
    messages: list[dict] = [{"role": "system", "content": system_prompt(context)}]
    for item in transcript(context.entries):
        if isinstance(item, Answer):
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
            if item.calls:
                message["tool_calls"] = [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
                    }
                    for call in item.calls
                ]
            messages.append(message)
            messages += [{"role": "tool", "tool_call_id": call.call_id, "content": call.result} for call in item.calls]
        elif messages[-1]["role"] == "user":
            messages[-1]["content"] += "\n\n" + item.text
        else:
            messages.append({"role": "user", "content": item.text})
    return messages


def tools_for(specs: list[dict]) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description") or "",
                "parameters": input_schema(spec),
            },
        }
        for spec in specs
    ]


def _arguments(raw: str | None) -> dict:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"arguments_not_json": raw}
    return value if isinstance(value, dict) else {"arguments_not_json": raw}


def usage_of(completion, model: str) -> Usage | None:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:
        cached = getattr(usage, "prompt_cache_hit_tokens", None)  # DeepSeek's name for it
    return Usage(
        model=getattr(completion, "model", None) or model,
        input_tokens=count(getattr(usage, "prompt_tokens", 0)),
        output_tokens=count(getattr(usage, "completion_tokens", 0)),
        cached_tokens=count(cached),
    )


def reply_from(completion, model: str) -> ModelReply:
    """The first choice of a chat completion as a ModelReply, with the answer's usage."""
    choices = getattr(completion, "choices", None) or []
    if not choices:
        raise ModelError(f"openai: the answer of {model!r} holds no choice")
    message = choices[0].message
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is None:  # not a function call (a custom tool): nothing offered it
            continue
        calls.append(ToolCall(function.name, _arguments(function.arguments)))
    return ModelReply(text=message.content or None, tool_calls=calls, usage=usage_of(completion, model))


class OpenAIChatModel(VendorModel):
    """One member's model on a chat-completions endpoint (``client``: an ``openai.AsyncOpenAI``)."""

    EXTRA = "openai"
    TITLE = "OpenAI"
    CLIENT = "AsyncOpenAI"
    ERROR = "OpenAIError"
    BASE_URL = "OPENAI_BASE_URL"

    @classmethod
    def credentials(cls, api_key: str | None) -> dict[str, str | None]:
        key = setting(api_key, "OPENAI_API_KEY")
        if not key:
            raise ValueError(
                "openai models need an API key: set OPENAI_API_KEY (a local server that checks none, "
                "such as Ollama or vLLM, takes any value)"
            )
        return {"api_key": key}

    async def request(self, context: StepContext):
        options: dict[str, Any] = {}
        if context.tool_specs:
            options["tools"] = tools_for(context.tool_specs)
        if self.max_tokens:
            options["max_tokens"] = self.max_tokens  # the name every compatible server knows
        return await self.client.chat.completions.create(model=self.model, messages=messages_for(context), **options)

    def reply(self, answer) -> ModelReply:
        return reply_from(answer, self.model)


sdk = OpenAIChatModel.sdk  # the SDK package, or a ValueError naming the extra
factory = OpenAIChatModel.factory  # the model factory for ``openai:<model>``
