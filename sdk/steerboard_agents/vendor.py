"""What the vendors' model adapters share: their SDK imported on demand, their key and
endpoint read from the flags or the SDK's variables, and a model that sends a step and
turns a refusal into a ``ModelError``.

Each adapter (sdk/steerboard_agents/openai_chat.py, sdk/steerboard_agents/anthropic_messages.py)
only spells the request and reads the answer in its vendor's format; the conversation it
spells is sdk/steerboard_agents/transcript.py's. Nothing here imports a vendor's SDK until a
model of that vendor is chosen (the SDKs are optional extras).
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from steerboard_agents.model import Model, ModelError, ModelReply, StepContext

DEFAULT_MAX_RETRIES = 4  # the SDK's retries of a 429, an overload or a 5xx


def setting(given: str | None, variable: str) -> str | None:
    """A flag's value, else the SDK's environment variable, else None (an empty value is none)."""
    return given or os.environ.get(variable) or None


def count(value) -> int:
    """A vendor's token count as an int: 0 for one it left out or sent as something else."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def input_schema(spec: dict) -> dict:
    """A tool spec's JSON Schema for its arguments; a tool without one takes an empty object."""
    return spec.get("input_schema") or {"type": "object", "properties": {}}


class VendorModel:
    """One member's model on a vendor's SDK client (``client``). A subclass names its SDK
    (``EXTRA``, ``TITLE``), the SDK's async client class (``CLIENT``) and base error
    (``ERROR``), the variable of its endpoint (``BASE_URL``), reads its key
    (``credentials``), sends one step (``request``) and reads the answer (``reply``)."""

    EXTRA: str
    TITLE: str
    CLIENT: str
    ERROR: str
    BASE_URL: str

    @classmethod
    def factory(
        cls,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int | None = None,
    ) -> Callable[[str], Model]:
        """The model factory for ``<EXTRA>:<model>``: checks now that the SDK and a key are there."""
        client_class = getattr(cls.sdk(), cls.CLIENT)
        options = {**cls.credentials(api_key), "base_url": setting(base_url, cls.BASE_URL), "max_retries": max_retries}

        def make(member: str) -> VendorModel:
            return cls(member, model=model, client=client_class(**options), max_tokens=max_tokens)

        return make

    @classmethod
    def sdk(cls):
        """The vendor's SDK package (named as its extra is), or a ValueError saying which extra brings it."""
        try:
            return importlib.import_module(cls.EXTRA)
        except ImportError as exc:
            raise ValueError(
                f"the {cls.EXTRA} models need the {cls.TITLE} SDK, which is not installed ({exc}): "
                f"pip install 'steerboard[{cls.EXTRA}]' (or pip install {cls.EXTRA})"
            ) from exc

    @classmethod
    def credentials(cls, api_key: str | None) -> dict[str, str | None]:
        """The client's key arguments, from the flag or the SDK's variables; a ValueError
        naming the variable when there is none."""
        raise NotImplementedError

    def __init__(self, member: str, *, model: str, client, max_tokens: int | None = None):
        self.member = member
        self.model = model
        self.client = client
        self.max_tokens = max_tokens
        self._error = getattr(self.sdk(), self.ERROR)

    async def aclose(self) -> None:
        """Close the SDK's connections (the session calls it when it ends)."""
        await self.client.close()

    async def step(self, context: StepContext) -> ModelReply:
        try:
            answer = await self.request(context)
        except self._error as exc:
            raise ModelError(f"{self.EXTRA}: {exc.__class__.__name__}: {exc}") from exc
        return self.reply(answer)

    async def request(self, context: StepContext) -> Any:
        """The SDK's answer to this step's request."""
        raise NotImplementedError

    def reply(self, answer: Any) -> ModelReply:
        """The SDK's answer as a ModelReply, with its usage."""
        raise NotImplementedError
