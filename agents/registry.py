"""The models a host or ``python -m agents run --model NAME`` can name.

Kept apart from agents/model.py (the interface) so that model.py imports no
model: the keyless model imports the interface, and this module imports both.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from agents.keyless import KeylessModel
from agents.model import EchoModel, Model


def model_factory(name: str) -> Callable[[str], Model]:
    """The model named on the command line, as a factory taking the member name.

    ``keyless`` and ``echo`` ship here; ``package.module:Class`` is any other
    model class, importable from the current environment, built with the
    member's name as its one argument (as these two are). A ValueError says
    what is wrong with a name that cannot be used.
    """
    if name == "echo":
        return EchoModel
    if name == "keyless":
        return KeylessModel
    if ":" not in name:
        raise ValueError(f"unknown model {name!r}; choose keyless, echo or package.module:Class")
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
