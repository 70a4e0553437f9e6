import pytest
from asgiref.sync import SyncToAsync
from django.db import connections

from mailbox.plumbing import db
from mailbox.plumbing import runtime

# Counts the tests that start real processes and prints the count (docs/code.md, "Tests").
pytest_plugins = ["tests.support.process_count", "pytester"]


def pytest_configure(config):
    """The controller of a pytest-xdist run picks the run's id itself (its workers have it as
    PYTEST_XDIST_TESTRUNUID), so that at the end it removes what they shared for the run
    (tests/support/run_shared.py: the migrated templates)."""
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist") \
            and getattr(config.option, "testrunuid", "unset") is None:
        import uuid

        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config):
    run_id = getattr(config.option, "testrunuid", None)
    if not hasattr(config, "workerinput") and run_id:
        from tests.support import run_shared

        run_shared.remove(run_id)


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """The test process's database: a copy of the run's migrated template (tests/support/live.py
    ``process_database``, what a live environment gets), in place of pytest-django's, which made
    each of a run's four workers ``migrate`` a database of its own from nothing (20-23 s at the
    start of each under load, 5 Dec: CPU the four spent at once on two cores) and, on
    PostgreSQL, drop it in its last test's teardown (a checkpoint of the whole cluster:
    tests/support/run_shared.py ``postgres_drop_at_end``)."""
    from django.conf import settings
    from django.db import connections

    from tests.support import live

    with django_db_blocker.unblock():
        name, remove = live.process_database()
        for settings_dict in (settings.DATABASES["default"], connections["default"].settings_dict):
            settings_dict["NAME"] = name
        connections["default"].close()
    yield
    with django_db_blocker.unblock():
        connections.close_all()
    remove()


@pytest.fixture(autouse=True)
def _runtime_fresh():
    """Each test starts in a process as if it had just started, and leaves it so
    (mailbox/plumbing/runtime.py): full quota and rate buckets, no fault armed, the heartbeat
    to be registered afresh in the test's database."""
    runtime.reset()
    yield
    runtime.reset()


@pytest.fixture
def clock(monkeypatch):
    """Time that moves only when the test says: ``clock.shift(seconds)`` (or a ``timedelta``).

    time-machine stops the wall clock (``time.time()``, ``timezone.now()``: what the
    database's timestamps, django-axes' cool-off and the sweeper's deadlines read), and
    the quota buckets (mailbox/plumbing/quota.py) are handed that clock in place of
    ``time.monotonic``, which time-machine leaves alone: the event loop's own timers
    (``loop.time()``) keep running, so the test's awaits and timeouts work as ever."""
    import time

    import time_machine

    from mailbox.plumbing import quota

    with time_machine.travel(time.time(), tick=False) as traveller:
        for buckets in (quota.history, quota.requests):
            monkeypatch.setattr(buckets, "clock", time.time)
        yield traveller


@pytest.fixture(autouse=True)
def _close_worker_connections():
    """Async code reaches the database from worker threads, each with a connection of
    its own: the process's database threads (mailbox/plumbing/db.py) and asgiref's shared
    thread (channels' database_sync_to_async in tests and the auth middleware).
    Close them, each on its own thread, so the test database can be dropped."""
    yield
    db.close_all()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


def _start_order(item) -> int:
    """Longest first: the ``slow`` tests, then the others that start processes (``e2e``,
    ``browser``), then the in-process ones, which are quick and fill the end of the run."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if item.get_closest_marker("e2e") is not None or item.get_closest_marker("browser") is not None:
        return 1
    return 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Every worker collects the tests in ``_start_order``'s order: a run used to end on one
    worker still busy with a twenty-second test it was handed last while the others stood
    idle. pytest-django sorts after this hook (its own is tryfirst too, and registered
    earlier), stably: the tests on the test database come first, in Django's order, and this
    order holds within each of its groups. Both sorts are stable, so every worker collects the
    same order, as pytest-xdist requires. (Where each test runs: ``pytest_xdist_make_scheduler``.)"""
    items.sort(key=_start_order)


_shared_modules: dict[str, bool] = {}


def _shares_a_server(path: str) -> bool:
    """Whether the test module at ``path`` (a node id's file) marks tests ``shared_server``."""
    if path not in _shared_modules:
        from pathlib import Path

        file = Path(__file__).resolve().parent.parent / path
        _shared_modules[path] = file.suffix == ".py" and file.exists() and "mark.shared_server" in file.read_text()
    return _shared_modules[path]


def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup`` (scripts/test.sh) a ``shared_server`` module's tests go to one
    pytest-xdist worker together, one after another, so the module starts its one server once;
    every other test goes to whichever worker is free. The module is read on the controller,
    which collects nothing: pytest-xdist's own ``xdist_group`` mark renames the node id, which
    pytest 9 no longer takes (``Item._nodeid``), and its groups fell apart."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SharedServerScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _shares_a_server(path) else super()._split_scope(nodeid)

    return SharedServerScheduling(config, log)


@pytest.fixture(scope="session")
def chromium_session():
    """One Chromium for the test process's browser tests (tests/frontend/conftest.py ``browser``),
    started at the first of them: each test gets contexts of its own (tests/support/chromium.py)."""
    from tests.support.chromium import ChromiumSession

    session = ChromiumSession()
    yield session
    session.close()


@pytest.fixture(scope="module")
def module_live_env(tmp_path_factory):
    from tests.support.live import LiveEnvironment

    environment = LiveEnvironment(tmp_path_factory.mktemp("live"))
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def module_daphne_server(module_live_env):
    from tests.support.live import DaphneProcess

    server = DaphneProcess(module_live_env).start()
    yield server
    server.stop()


@pytest.fixture
async def api():
    """REST through httpx's ASGI transport to the application, in this process (tests/support/inproc.py ``Api``)."""
    from tests.support.inproc import Api

    client = Api()
    yield client
    await client.close()


@pytest.fixture
def inproc_env(transactional_db, tmp_path):
    """The test database, asked as a live environment is (tests/support/inproc.py)."""
    from tests.support.inproc import InProcessEnvironment

    return InProcessEnvironment(tmp_path)


@pytest.fixture
async def served(transactional_db, settings):
    """The application served on a real socket by the test's event loop, with the timings the
    live environments' daphne processes have (tests/support/inproc.py ``Served``); no process."""
    from tests.support.inproc import LIVE_TIMINGS, Served, sweeper_stop

    settings.STEERBOARD = {**settings.STEERBOARD, **LIVE_TIMINGS}
    server = await Served().start()
    yield server
    await server.stop()
    await sweeper_stop()


@pytest.fixture
def served_thread(transactional_db, settings):
    """``served`` on an event loop of its own in a thread of this process, for tests that call
    the server synchronously, as they would a daphne process (tests/support/inproc.py)."""
    from tests.support.inproc import LIVE_TIMINGS, ServedThread

    settings.STEERBOARD = {**settings.STEERBOARD, **LIVE_TIMINGS}
    server = ServedThread().start()
    yield server
    server.stop()


@pytest.fixture
def own_database(tmp_path, monkeypatch):
    """``(environment, server, pg)``: one daphne on a PostgreSQL cluster and a redis-server of the
    test's own, which the test may stop (tests/support/live.py ``own_database``)."""
    from tests.support.live import own_database

    with own_database(tmp_path, monkeypatch) as running:
        yield running


def _shared(request) -> bool:
    return request.node.get_closest_marker("shared_server") is not None


@pytest.fixture
def live_env(request, tmp_path):
    """A fresh database for daphne processes started by the test; in a ``shared_server``
    module, the module's one environment (each test makes a team of its own)."""
    if _shared(request):
        yield request.getfixturevalue("module_live_env")
        return
    from tests.support.live import LiveEnvironment

    environment = LiveEnvironment(tmp_path)
    yield environment
    environment.close()


@pytest.fixture
def daphne_server(request, live_env):
    """One real daphne process on the embedded default (or the run's PostgreSQL + Redis); in a
    ``shared_server`` module, the module's one daphne, started again if a test ended it."""
    from tests.support.live import DaphneProcess

    if _shared(request):
        server = request.getfixturevalue("module_daphne_server")
        if server.proc is None or server.proc.poll() is not None:
            server.start()
        yield server
        return
    server = DaphneProcess(live_env).start()
    yield server
    server.stop()
