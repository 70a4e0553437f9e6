"""config/settings.py in production (issue 12, item 16): no SECRET_KEY, no start;
the HTTPS settings from the environment make `manage.py check --deploy` clean;
Swagger UI comes from this server's own static files."""
import importlib.util
import logging.config
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.support.live import embedded_run_only
from tests.support.settings_env import settings_from_env

ROOT = Path(__file__).resolve().parents[1]
# Its manage.py processes run without DATABASE_URL and REDIS_URL whatever the run is on.
pytestmark = embedded_run_only("settings checks without DATABASE_URL")


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    base.pop("DATABASE_URL", None)
    base.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _manage_py_start(monkeypatch, tmp_path, *argv: str):
    """What ``python manage.py ARGV`` does before Django starts, in this process: the key it
    finds or makes (manage.py's ``_local_secret_key``), without SECRET_KEY, DEBUG and
    DATABASE_URL; then config/settings.py read afresh with that key (tests/support/settings_env.py)."""
    for name in ("SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL"):
        monkeypatch.setenv(name, "")  # put back after the test, whatever manage.py sets
        monkeypatch.delenv(name)
    monkeypatch.setenv("STEERBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["manage.py", *argv])
    spec = importlib.util.spec_from_file_location("manage_py", ROOT / "manage.py")
    manage_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manage_py)
    manage_py._local_secret_key()
    return settings_from_env(monkeypatch, SECRET_KEY=os.environ["SECRET_KEY"], STEERBOARD_VAR_DIR=str(tmp_path))


def test_a_local_run_needs_no_secret_key_and_every_command_shares_the_demos_key(monkeypatch, tmp_path):
    """Without DATABASE_URL (the embedded default) every command works as the demo
    does: one generated key, kept under var/, the same for each command."""
    first = _manage_py_start(monkeypatch, tmp_path, "shell")
    key = (tmp_path / "secret-key").read_text().strip()
    assert len(key) >= 50 and first.SECRET_KEY == key
    assert oct((tmp_path / "secret-key").stat().st_mode & 0o777) == "0o600"
    assert _manage_py_start(monkeypatch, tmp_path, "check").SECRET_KEY == key
    assert _manage_py_start(monkeypatch, tmp_path, "demo").SECRET_KEY == key


def test_a_demo_key_made_before_is_the_one_kept(monkeypatch, tmp_path):
    (tmp_path / "demo-secret-key").write_text("d" * 60)
    assert _manage_py_start(monkeypatch, tmp_path, "shell").SECRET_KEY == "d" * 60
    assert (tmp_path / "secret-key").read_text() == "d" * 60


@pytest.mark.parametrize("command", [["check"], ["team_create", "t1"], ["migrate"]])
def test_a_deployment_without_secret_key_gets_one_line_and_a_failed_exit(tmp_path, command):
    """With DATABASE_URL set nothing is generated: the refusal is one line on stderr."""
    result = _manage(*command, DATABASE_URL="postgres://nobody@127.0.0.1:1/nothing", STEERBOARD_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("manage.py: SECRET_KEY is not set.")
    assert not (tmp_path / "secret-key").exists()


def test_with_debug_on_a_deployment_without_secret_key_goes_on_with_a_development_key(monkeypatch, tmp_path):
    """What ``DEBUG=1 DATABASE_URL=... manage.py check`` does before Django starts, in this
    process: manage.py generates nothing, and config/settings.py, read afresh, starts with a key."""
    for name in ("SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "argv", ["manage.py", "check"])
    env = {"DEBUG": "1", "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing", "STEERBOARD_VAR_DIR": str(tmp_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("manage_py", ROOT / "manage.py")
    manage_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manage_py)
    manage_py._local_secret_key()
    assert "SECRET_KEY" not in os.environ and not (tmp_path / "secret-key").exists()
    development = settings_from_env(monkeypatch, **env)
    assert development.DEBUG is True and "development-only" in development.SECRET_KEY
    # Without DEBUG the same settings refuse to start (the command's one line above says so).
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is not set"):
        settings_from_env(monkeypatch, DATABASE_URL=env["DATABASE_URL"], STEERBOARD_VAR_DIR=str(tmp_path))


def test_the_server_refuses_to_start_without_secret_key(tmp_path):
    """daphne loads config.asgi, not manage.py: no key is generated for it, even locally."""
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"],
        cwd=ROOT, env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "STEERBOARD_VAR_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set" in result.stderr


def test_check_deploy_is_clean_with_the_production_environment(tmp_path):
    production = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "board.example.org",
        "CSRF_TRUSTED_ORIGINS": "https://board.example.org",
        "STEERBOARD_HTTPS": "1",
        "STEERBOARD_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        "STEERBOARD_HSTS_PRELOAD": "1",
        "STEERBOARD_VAR_DIR": str(tmp_path),
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **production)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
    # And without them, the same check names what is missing: it is not clean by accident.
    bare = _manage("check", "--deploy", "--fail-level", "WARNING", SECRET_KEY=production["SECRET_KEY"],
                   STEERBOARD_VAR_DIR=str(tmp_path))
    assert bare.returncode != 0 and "security.W004" in bare.stderr + bare.stdout


def test_https_settings_follow_the_environment(monkeypatch, tmp_path):
    s = settings_from_env(
        monkeypatch, SECRET_KEY="k" * 60, STEERBOARD_HTTPS="1", STEERBOARD_PROXY_SSL_HEADER="X-Forwarded-Proto",
        CSRF_TRUSTED_ORIGINS="https://a.example,https://b.example", STEERBOARD_VAR_DIR=str(tmp_path),
    )
    assert (s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS,
            s.SECURE_PROXY_SSL_HEADER, s.CSRF_TRUSTED_ORIGINS, len(s.AUTH_PASSWORD_VALIDATORS)) == (
        True, True, True, 31536000, ("HTTP_X_FORWARDED_PROTO", "https"), ["https://a.example", "https://b.example"], 4)


@pytest.mark.django_db
def test_swagger_ui_loads_its_assets_from_this_server(client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("reader", password="x" * 20))
    page = client.get("/api/docs/").content.decode()
    assert "cdn" not in page.lower() and "https://" not in page
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js").status_code == 200


@pytest.mark.django_db
def test_with_https_plain_http_is_redirected_but_the_health_checks_are_not(client, settings, monkeypatch, tmp_path):
    """The run's application with the HTTPS settings STEERBOARD_HTTPS=1 gives (read afresh)."""
    https = settings_from_env(monkeypatch, SECRET_KEY="k" * 60, STEERBOARD_HTTPS="1", STEERBOARD_VAR_DIR=str(tmp_path))
    for name in ("SECURE_SSL_REDIRECT", "SECURE_REDIRECT_EXEMPT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
                 "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "MIDDLEWARE"):
        setattr(settings, name, getattr(https, name))
    assert settings.SECURE_SSL_REDIRECT is True
    assert client.get("/login/").status_code == 301
    assert client.get("/healthz").status_code != 301 and client.get("/readyz").status_code != 301
    assert client.get("/login/", secure=True).status_code == 200


def test_a_bad_log_format_or_metrics_allow_list_stops_the_start_with_its_name(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match=r"LOG_FORMAT is 'text' \(the default\) or 'json'"):
        settings_from_env(monkeypatch, DEBUG="1", LOG_FORMAT="yaml")
    with pytest.raises(ImproperlyConfigured, match="STEERBOARD_METRICS_ALLOW"):
        settings_from_env(monkeypatch, DEBUG="1", STEERBOARD_METRICS_ALLOW="127.0.0.1,10.0.0.0/33")
    taken = settings_from_env(monkeypatch, DEBUG="1", LOG_FORMAT="json", STEERBOARD_METRICS_ALLOW="127.0.0.1")
    assert taken.STEERBOARD["METRICS_ALLOW"] == ("127.0.0.1",)
    # JSON lines: the console handler's formatter is the JSON one, and it can be built as dictConfig builds it.
    assert taken.LOGGING["handlers"]["console"]["formatter"] == "json"
    formatter = logging.config.DictConfigurator(taken.LOGGING).configure_formatter(taken.LOGGING["formatters"]["json"])
    assert type(formatter).__name__ == "JsonFormatter"
