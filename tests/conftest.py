import pytest
from asgiref.sync import SyncToAsync
from django.db import connections

from mailbox import db, faults, presence


@pytest.fixture(autouse=True)
def _faults_disarmed():
    faults.disarm_all()
    yield
    faults.disarm_all()


@pytest.fixture(autouse=True)
def _quota_buckets_empty():
    """Each test starts with full quota and rate buckets (mailbox/quota.py): member ids
    are reused by the next test's database, and one test's spending is not the next's."""
    from mailbox import quota

    quota.history.clear()
    quota.requests.clear()
    yield


@pytest.fixture(autouse=True)
def _process_registers_afresh(monkeypatch):
    """Each test's database starts without this process's heartbeat row. The
    process registers afresh; it must not take the missing row for a sign that
    it was reaped (it would close the test's websockets, mailbox/presence.py)."""
    monkeypatch.setattr(presence, "_registered", False)


@pytest.fixture(autouse=True)
def _close_worker_connections():
    """Async code reaches the database from worker threads, each with a connection of
    its own: the process's database threads (mailbox/db.py) and asgiref's shared
    thread (channels' database_sync_to_async in tests and the auth middleware).
    Close them, each on its own thread, so the test database can be dropped."""
    yield
    db.close_all()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


@pytest.fixture
def live_env(tmp_path):
    """A fresh database for daphne processes started by the test."""
    from tests.support.live import LiveEnvironment

    environment = LiveEnvironment(tmp_path)
    yield environment
    environment.close()


@pytest.fixture
def daphne_server(live_env):
    """One real daphne process on the embedded default (or the run's PostgreSQL + Redis)."""
    from tests.support.live import DaphneProcess

    server = DaphneProcess(live_env).start()
    yield server
    server.stop()
