"""The test run's settings: those of the processes a test starts (tests/support/live_settings.py:
config.settings with a fast password hasher), with a SECRET_KEY of the run's own.

Production refuses to start without SECRET_KEY (DEBUG off); a test run makes a
random one unless the environment has one. It goes into os.environ, so the
daphne processes and manage.py commands a test starts share it (their dashboard
sessions are the test's)."""
import os
import secrets

os.environ.setdefault("SECRET_KEY", "test-" + secrets.token_urlsafe(40))
# Parallel workers (pytest-xdist, scripts/test.sh) share the run's Redis: a channel prefix
# each, or one worker's team 1 would hear another's. (Their test databases are apart: each
# test process gets a copy of the run's template of its own, tests/conftest.py django_db_setup.)
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("REDIS_URL"):
    os.environ["STEERBOARD_CHANNEL_PREFIX"] = f"steerboard-test-{os.environ['PYTEST_XDIST_WORKER']}-{os.getpid()}:"

# The settings of the processes a test starts: config.settings with a fast password hasher.
from tests.support.live_settings import *  # noqa: E402,F401,F403

# The test run's `flush` after each transactional test: a DELETE of each table's rows, not
# Django's TRUNCATE and post_migrate (tests/support/quick_flush/management/commands/flush.py).
INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.quick_flush"]  # noqa: F405
