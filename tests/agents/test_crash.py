"""sdk/steerboard_protocol/crash.py: the hard kills at known points that the SDK (sdk/steerboard_agents/client.py) and the server
(mailbox/plumbing/faults.py) share, each reading its own environment variable."""
import subprocess
import sys

from tests.support.live import ROOT

_SCRIPT = (
    "from steerboard_protocol.crash import CrashPoints\n"
    "points = CrashPoints('CRASH_AT', exit_code_env='CRASH_CODE')\n"
    "for point in ['a', 'b', 'a', 'b', 'b']:\n"
    "    points.reached(point)\n"
    "    print(point, flush=True)\n"
)


def _run(**env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})


def test_the_process_ends_the_nth_time_the_named_point_is_reached():
    """A real process: it ends at once (os._exit, as kill -9), before the point's next line."""
    result = _run(CRASH_AT="b:2")
    assert result.returncode == 137
    assert result.stdout.split() == ["a", "b", "a"]  # the second "b" never printed


class _Exited(BaseException):
    """What os._exit does in the tests below, which run the points in this process: it ends
    the call instead of the process, with the code the process would have ended with."""


def _reached_in_process(monkeypatch, points: list[str], **env) -> tuple[list[str], int | None]:
    """The script's loop in this process: the points passed before an exit, and its code."""
    from steerboard_protocol import crash

    def exit_now(code: int):
        raise _Exited(code)

    for name in ("CRASH_AT", "CRASH_CODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(crash.os, "_exit", exit_now)
    crash_points = crash.CrashPoints("CRASH_AT", exit_code_env="CRASH_CODE")
    passed: list[str] = []
    try:
        for point in points:
            crash_points.reached(point)
            passed.append(point)
    except _Exited as exited:
        return passed, exited.args[0]
    return passed, None


def test_the_first_time_without_a_count_and_the_exit_code_from_its_variable(monkeypatch):
    assert _reached_in_process(monkeypatch, ["a", "b", "a"], CRASH_AT="a", CRASH_CODE="3") == ([], 3)
    assert _reached_in_process(monkeypatch, ["b", "a"], CRASH_AT="a") == (["b"], 137)  # kill -9's code by default


def test_nothing_happens_unless_the_variable_names_the_point(monkeypatch):
    points = ["a", "b", "a", "b", "b"]
    assert _reached_in_process(monkeypatch, points) == (points, None)
    assert _reached_in_process(monkeypatch, points, CRASH_AT="c:1") == (points, None)
