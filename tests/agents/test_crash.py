"""sdk/steerboard_protocol/crash.py: the hard kills at known points that the SDK (sdk/steerboard_agents/client.py) and the server
(mailbox/engine/faults.py) share, each reading its own environment variable."""
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
    result = _run(CRASH_AT="b:2")
    assert result.returncode == 137
    assert result.stdout.split() == ["a", "b", "a"]  # the second "b" never printed


def test_the_first_time_without_a_count_and_the_exit_code_from_its_variable():
    result = _run(CRASH_AT="a", CRASH_CODE="3")
    assert (result.returncode, result.stdout.split()) == (3, [])


def test_nothing_happens_unless_the_variable_names_the_point():
    assert _run().stdout.split() == ["a", "b", "a", "b", "b"]
    assert _run(CRASH_AT="c:1").returncode == 0
