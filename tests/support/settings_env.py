"""``config/settings.py`` read afresh, in this process, under an environment of the test's own.

``settings_from_env(monkeypatch, DEBUG="1", LOG_FORMAT="yaml")`` imports ``config.settings``
again (tests/support/fresh_import.py) with those variables set and the run's own (SECRET_KEY,
DEBUG, DATABASE_URL, REDIS_URL, the STEERBOARD_ limits and timings) removed, as a deployment's
process would read them at its start: the module, or the ImproperlyConfigured with which that
start stops. The run's settings (``django.conf.settings``) are untouched."""
import importlib
import os

from tests.support.fresh_import import fresh_import

# What the test run sets for itself that a deployment's process would not have.
_RUNS_OWN = ("SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE",
             "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "LOG_FORMAT")


def settings_from_env(monkeypatch, **env: str):
    for name in list(os.environ):
        if name in _RUNS_OWN or name.startswith("STEERBOARD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with fresh_import(["config"]):
        return importlib.import_module("config.settings")
