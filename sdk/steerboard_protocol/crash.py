"""Hard kills at known points, for tests that inject one on purpose.

A ``CrashPoints`` reads one environment variable: when it names a point
(``<point>`` or ``<point>:N``), the process ends at once (``os._exit``, as
``kill -9``) the Nth time that point is reached. No Django: the SDK's tool
calls (sdk/steerboard_agents/client.py, ``STEERBOARD_AGENTS_CRASH_AT``) and the server's
delivery path (mailbox/plumbing/faults.py, ``STEERBOARD_CRASH_AT``) both count their
points here.
"""
import os
import threading


class CrashPoints:
    def __init__(self, env: str, *, exit_code_env: str = ""):
        """``env`` names the point to crash at; ``exit_code_env``, if given, the exit code (137 otherwise)."""
        self.env = env
        self.exit_code_env = exit_code_env
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def reached(self, point: str) -> None:
        spec = os.environ.get(self.env)
        if not spec:
            return
        name, _, nth = spec.partition(":")
        if name != point:
            return
        with self._lock:
            count = self._counts[point] = self._counts.get(point, 0) + 1
        if count >= int(nth or 1):
            os._exit(int(os.environ.get(self.exit_code_env, "137")) if self.exit_code_env else 137)
