"""Fault points on the delivery path (and one on the task board), for tests that inject a fault on purpose.

Two kinds:

- ``inject(point)`` raises ``TemporaryDeliveryError`` when a test armed that
  point with ``arm(point, times)``. Points: ``inspection``, ``admission``,
  ``resume``, ``push``, ``delivered_record``.
- ``crash_point(name)`` ends the process at once (``os._exit``) when the
  environment says ``STEERBOARD_CRASH_AT=name`` or ``name:N`` (the Nth time
  the point is reached). Points: ``after_queued_commit``, ``after_admission``,
  ``after_entry``, ``mid_recovery``, and ``after_task_commit`` (a task created
  and committed, its answer not sent: a kill at a known point of a workflow).
"""
import threading

from mailbox.plumbing import runtime
from steerboard_protocol.crash import CrashPoints


class TemporaryDeliveryError(Exception):
    """Inspection, resume or admission failed for now; the message stays queued."""


_lock = threading.Lock()
_armed: dict[str, int] = {}
_crashes = CrashPoints("STEERBOARD_CRASH_AT", exit_code_env="STEERBOARD_CRASH_EXIT_CODE")


def arm(point: str, times: int = 1) -> None:
    with _lock:
        _armed[point] = times


@runtime.on_reset
def disarm_all() -> None:
    with _lock:
        _armed.clear()


def armed(points) -> bool:
    """Whether a test armed any of these points (the hot path then takes the path that injects them)."""
    return bool(_armed) and any(_armed.get(p, 0) > 0 for p in points)


def inject(point: str) -> None:
    with _lock:
        left = _armed.get(point, 0)
        if left <= 0:
            return
        _armed[point] = left - 1
    raise TemporaryDeliveryError(f"injected temporary {point} failure")


def crash_point(name: str) -> None:
    """End the process here when ``STEERBOARD_CRASH_AT`` names this point (the module's docstring;
    the counting is sdk/steerboard_protocol/crash.py's, shared with the SDK's own crash points)."""
    _crashes.reached(name)
