"""The models a host or ``python -m steerboard_agents run --model NAME`` can name.

Kept apart from sdk/steerboard_agents/model.py (the interface) so that model.py imports no
model: the keyless model imports the interface, and this module imports both.

A name is ``keyless``, ``echo``, ``openai:<model>``, ``anthropic:<model>``
(a vendor's model through its SDK: sdk/steerboard_agents/openai_chat.py,
sdk/steerboard_agents/anthropic_messages.py) or ``package.module:Class``; the vendors'
prefixes are read first, so ``openai:llama3.1:8b`` is a model name, not a
module. ``models_choose`` takes several, one per member (``lead=anthropic:...``)
and a default for everyone else (a bare name, or ``*=NAME``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

from steerboard_agents import anthropic_messages, openai_chat
from steerboard_agents.keyless import KeylessModel
from steerboard_agents.model import EchoModel, Model

VENDORS = {"openai": openai_chat, "anthropic": anthropic_messages}
NAMES = "keyless, echo, openai:MODEL, anthropic:MODEL or package.module:Class"
_PER_MEMBER = re.compile(r"^(\*|[a-z][a-z0-9]*(?:-[a-z0-9]+)*)=(.*)$", re.S)


@dataclass(frozen=True)
class VendorOptions:
    """What the vendors' models are built with; None: the SDK's environment variable or default."""

    openai_base_url: str | None = None
    openai_api_key: str | None = None
    anthropic_base_url: str | None = None
    anthropic_api_key: str | None = None
    max_retries: int | None = None  # the SDK's retries of a 429, an overload or a 5xx
    max_tokens: int | None = None  # the longest answer (anthropic: 4096 unless given)


def model_factory(name: str, options: VendorOptions | None = None) -> Callable[[str], Model]:
    """The model named on the command line, as a factory taking the member name.

    ``keyless`` and ``echo`` ship here; ``openai:<model>`` and
    ``anthropic:<model>`` are the vendors' models (their SDK is imported now,
    and a missing SDK or key is said now, not at the first turn);
    ``package.module:Class`` is any other model class, importable from the
    current environment, built with the member's name as its one argument (as
    these are). A ValueError says what is wrong with a name that cannot be used.
    """
    if name == "echo":
        return EchoModel
    if name == "keyless":
        return KeylessModel
    vendor, colon, model = name.partition(":")
    if colon and vendor in VENDORS:
        if not model.strip():
            raise ValueError(f"{name!r} names no model: {vendor}:MODEL")
        return _vendor_factory(vendor, model.strip(), options or VendorOptions())
    if ":" not in name:
        raise ValueError(f"unknown model {name!r}; choose {NAMES}")
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{name!r} is not package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} for the model {name!r}: {exc}") from exc
    found = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ValueError(f"{module_name!r} has no {attribute!r}")
    if not callable(found) or not inspect.iscoroutinefunction(getattr(found, "step", None)):
        raise ValueError(f"{name!r} is not a model class: it needs an async step(context) method")
    return found


def _vendor_factory(vendor: str, model: str, options: VendorOptions) -> Callable[[str], Model]:
    settings = {"max_tokens": options.max_tokens}
    if options.max_retries is not None:
        settings["max_retries"] = options.max_retries
    if vendor == "openai":
        return openai_chat.factory(model, base_url=options.openai_base_url, api_key=options.openai_api_key, **settings)
    return anthropic_messages.factory(
        model, base_url=options.anthropic_base_url, api_key=options.anthropic_api_key, **settings
    )


def model_check(value: str) -> str:
    """What can be checked of one ``--model`` value before the other options are read: its
    form, a model class's import, a vendor SDK's presence. The value, or a ValueError."""
    member, spec = member_and_name(value)
    vendor, colon, model = spec.partition(":")
    if colon and vendor in VENDORS:
        if not model.strip():
            raise ValueError(f"{spec!r} names no model: {vendor}:MODEL")
        VENDORS[vendor].sdk()
    else:
        model_factory(spec)
    return value


def member_and_name(value: str) -> tuple[str, str]:
    """``lead=NAME`` -> ("lead", NAME); ``*=NAME`` and a bare NAME -> ("*", NAME)."""
    found = _PER_MEMBER.match(value)
    if found is None:
        return "*", value
    if not found.group(2):
        raise ValueError(f"{value!r} names no model for {found.group(1)!r}")
    return found.group(1), found.group(2)


class ModelChoice:
    """The models of a host or a session: each member's own, else the default (keyless
    when none is named). Called with a member's name, it builds that member's model."""

    def __init__(self, default: Callable[[str], Model], members: dict[str, Callable[[str], Model]], names: dict[str, str]):
        self.default = default
        self.members = members
        self.names = names  # member (or "*") -> the name it was chosen by, for messages

    def __call__(self, member: str) -> Model:
        return self.members.get(member, self.default)(member)

    def factories(self) -> list[Callable[[str], Model]]:
        return [self.default, *self.members.values()]

    def paced(self, step_delay: float) -> "ModelChoice":
        """The keyless models wait ``step_delay`` before each step; a ValueError when none is keyless."""
        if not any(f is KeylessModel for f in self.factories()):
            raise ValueError("--step-delay paces the keyless model only")

        def pace(factory):
            return functools.partial(KeylessModel, step_delay=step_delay) if factory is KeylessModel else factory

        return ModelChoice(pace(self.default), {m: pace(f) for m, f in self.members.items()}, self.names)


def models_choose(values: list[str] | None, options: VendorOptions | None = None) -> ModelChoice:
    """The ``--model`` values, in order: ``NAME`` or ``*=NAME`` for everyone, ``member=NAME``
    for one member. Naming one member twice, or the default twice, is a ValueError."""
    chosen: dict[str, Callable[[str], Model]] = {}
    names: dict[str, str] = {}
    for value in values or ["keyless"]:
        member, name = member_and_name(value)
        if member in chosen:
            who = "everyone" if member == "*" else repr(member)
            raise ValueError(f"two models for {who}: {names[member]!r} and {name!r}")
        chosen[member] = model_factory(name, options)
        names[member] = name
    default = chosen.pop("*", KeylessModel)
    names.setdefault("*", "keyless")
    return ModelChoice(default, chosen, names)
