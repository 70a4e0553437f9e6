"""What a server process keeps in memory between requests, and the one way to start it afresh.

A module that keeps such state (the quota and rate buckets, the armed fault points, this
process's heartbeat registration) says how to forget it with ``@runtime.on_reset``;
``reset()`` runs every one of them. The tests' one fixture (``_runtime_fresh``,
tests/conftest.py) calls it before and after each test: no test inherits another's
spending, faults or registration, and a test never reaches into a module's variables
to reset them. Plumbing: imports nothing of the project.
"""
from collections.abc import Callable

_resets: list[Callable[[], None]] = []


def on_reset(forget: Callable[[], None]) -> Callable[[], None]:
    """Register how a module forgets what it keeps (a decorator)."""
    _resets.append(forget)
    return forget


def reset() -> None:
    """This process as if it had just started: every registered state forgotten."""
    for forget in _resets:
        forget()
