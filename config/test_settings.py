"""The test run's settings: config.settings with a SECRET_KEY of the run's own.

Production refuses to start without SECRET_KEY (DEBUG off); a test run makes a
random one unless the environment has one. It goes into os.environ, so the
daphne processes and manage.py commands a test starts share it (their dashboard
sessions are the test's)."""
import os
import secrets

os.environ.setdefault("SECRET_KEY", "test-" + secrets.token_urlsafe(40))

from config.settings import *  # noqa: E402,F401,F403
