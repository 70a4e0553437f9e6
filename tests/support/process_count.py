"""Which tests start real processes: counted per test, printed at the end of the run.

docs/code.md ("Tests") keeps real processes for tests whose subject is a process; this
plugin makes that number a figure every run prints. ``subprocess.Popen`` is wrapped once
(asyncio's subprocesses, Playwright's driver, ``subprocess.run`` all start through it); a
process started while a test's setup or call runs is that test's, from whichever thread
started it. A module- or session-scoped fixture's process is the test's that first asked
for the fixture; a teardown's process is nobody's.

The summary line is ``tests that started a process: N``; under ``-v`` (or with
``STEERBOARD_TEST_PROCESSES=1``) each such test follows with what it started. Under
pytest-xdist each worker puts a test's processes in its report's ``user_properties``,
and the controller adds up the reports."""
import os
import platform
import subprocess
from pathlib import Path

import pytest

KEY = "started_processes"
SUMMARY = "tests that started a process"

_original_init = subprocess.Popen.__init__
# The tests running now, innermost last: a pytest run inside a test (pytester) puts its own
# tests on top, and their processes are theirs, not the outer test's.
_running: list[list[str]] = []


def _name(args) -> str:
    """A short name for what started: the program, and the module after ``-m``."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if not argv:
        return "?"
    name = Path(argv[0].split()[0]).name
    if "-m" in argv[1:-1]:
        name += " -m " + argv[argv.index("-m", 1) + 1]
    elif name.startswith("python") and len(argv) > 1:
        name += " " + Path(argv[1]).name
    return name


def _init(self, args, *rest, **kwargs):
    if _running and _running[-1] is not None:
        _running[-1].append(_name(args))
    return _original_init(self, args, *rest, **kwargs)


_started_key = pytest.StashKey[list]()


def pytest_configure(config):
    # The platform module runs ``uname -p`` once per process, the first time anything asks for the
    # processor (the vendors' SDKs do, for their request headers): asked here, before any test.
    platform.processor()
    if subprocess.Popen.__init__ is not _init:
        subprocess.Popen.__init__ = _init
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Tally(), "process_count_tally")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _running.append([])
    try:
        return (yield)
    finally:
        item.stash[_started_key] = _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _running.append(item.stash.get(_started_key, []))
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    _running.append(None)  # a teardown's processes are nobody's
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Before the report is made from the item: what the test started goes into it (the same
    list, so the call's report holds the setup's processes and the call's)."""
    started = item.stash.get(_started_key, [])
    if started and call.when in ("setup", "call") and not any(k == KEY for k, _ in item.user_properties):
        item.user_properties.append((KEY, started))


class Tally:
    """On the controller (or the only process): the run's tests that started a process."""

    def __init__(self):
        self.tests: dict[str, list[str]] = {}

    def pytest_runtest_logreport(self, report):
        for key, started in getattr(report, "user_properties", ()):
            if key == KEY:
                self.tests[report.nodeid] = list(started)

    def pytest_terminal_summary(self, terminalreporter, config):
        terminalreporter.write_sep("-", f"{SUMMARY}: {len(self.tests)}")
        if config.option.verbose > 0 or os.environ.get("STEERBOARD_TEST_PROCESSES"):
            for nodeid in sorted(self.tests):
                names = self.tests[nodeid]
                counts = {n: names.count(n) for n in dict.fromkeys(names)}
                what = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items())
                terminalreporter.write_line(f"{nodeid}: {what}")
