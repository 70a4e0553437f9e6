"""tests/support/process_count.py: the run counts the tests that start a process and prints
the count, with the tests under -v; a pytest-xdist controller counts its workers' reports.

The inner runs are pytest sessions in this process (pytester's in-process run): their tests'
processes are the inner tests', so this test starts none of its own that counts."""
import sys

import pytest
from _pytest.reports import _report_to_json, _report_kwargs_from_json, TestReport

from tests.support import process_count

INNER = """
import subprocess
import sys
import threading

import pytest


@pytest.fixture(scope="module")
def started_once():
    subprocess.run(["true"], check=True)


def test_starts_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_one_from_a_thread():
    thread = threading.Thread(target=subprocess.run, args=(["true"],))
    thread.start()
    thread.join()


def test_asks_first_for_the_module_fixture(started_once):
    pass


def test_asks_again_for_the_module_fixture(started_once):
    pass


def test_starts_none():
    pass


def test_starts_one_in_teardown_only(request):
    request.addfinalizer(lambda: subprocess.run(["true"], check=True))
"""

COUNTED = {"test_starts_one", "test_starts_one_from_a_thread", "test_asks_first_for_the_module_fixture"}


# The inner runs need none of the suite's plugins (Django's is set up already, by this run).
QUIET = ("-p", "no:django", "-p", "no:asyncio", "-p", "no:cacheprovider")


def _inner(pytester, *args):
    pytester.makepyfile(test_inner=INNER)
    return pytester.runpytest_inprocess(*QUIET, *args, plugins=[process_count])


def test_the_run_prints_how_many_tests_started_a_process(pytester, monkeypatch):
    monkeypatch.delenv("STEERBOARD_TEST_PROCESSES", raising=False)
    result = _inner(pytester)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines([f"*{process_count.SUMMARY}: 3*"])
    assert "test_inner.py::test_starts_one:" not in result.stdout.str(), "the list waits for -v"


def test_under_v_each_such_test_is_listed_with_what_it_started(pytester):
    result = _inner(pytester, "-v")
    listed = [line.split("::")[1] for line in result.outlines if line.startswith("test_inner.py::") and ": " in line
              and "PASSED" not in line]
    assert {name.split(":")[0] for name in listed} == COUNTED
    assert "test_inner.py::test_starts_one: " + process_count._name([sys.executable, "-c", "pass"]) in result.outlines


def test_a_controller_counts_what_its_workers_report(pytester):
    """pytest-xdist sends each report to the controller as JSON: what the workers counted
    survives the trip, and the controller's tally adds it up."""
    pytester.makepyfile(test_inner=INNER)
    recorder = pytester.inline_run(*QUIET, plugins=[process_count])
    tally = process_count.Tally()
    for report in recorder.getreports("pytest_runtest_logreport"):
        tally.pytest_runtest_logreport(TestReport(**_report_kwargs_from_json(_report_to_json(report))))
    assert {nodeid.split("::")[1] for nodeid in tally.tests} == COUNTED
    assert ["true"] in tally.tests.values()


@pytest.mark.parametrize("args, name", [
    (["/usr/bin/python3", "-m", "steerboard_agents", "run"], "python3 -m steerboard_agents"),
    (["/x/.venv/bin/python", "/x/manage.py", "migrate"], "python manage.py"),
    ("pg_ctl -D data start", "pg_ctl"),
    ([b"/usr/bin/redis-server", b"--port", b"1"], "redis-server"),
])
def test_a_process_is_named_by_its_program_and_module(args, name):
    assert process_count._name(args) == name
