import pytest

from mailbox import faults


@pytest.fixture(autouse=True)
def _faults_disarmed():
    faults.disarm_all()
    yield
    faults.disarm_all()


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
