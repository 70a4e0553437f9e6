"""The main job: ``python manage.py demo`` runs the keyless team to TEAM_WORKFLOW_OK."""
import os
import re
import subprocess
import sys

import pytest

from tests.support.live import ROOT, free_port

pytestmark = pytest.mark.e2e


def demo(var_dir, *args, timeout=240):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["STEERBOARD_VAR_DIR"] = str(var_dir)
    return subprocess.run(
        [sys.executable, "manage.py", "demo", "--port", str(free_port()), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_demo_exits_0_once_the_lead_reports_and_runs_again_on_the_same_database(tmp_path):
    teams = []
    for _ in range(2):
        result = demo(tmp_path / "var", "--exit-when-done", "--timeout", "180")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "TEAM_WORKFLOW_OK" in result.stdout
        url = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+/teams/([a-z0-9_-]+)/)", result.stdout)
        assert url, result.stdout
        assert re.search(r"login\s+demo / \S+", result.stdout)
        teams.append(url.group(2))
    assert teams[0] != teams[1]
    assert (tmp_path / "var" / "steerboard.sqlite3").exists()


def test_demo_fails_with_a_reason_when_the_port_is_taken(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env["STEERBOARD_VAR_DIR"] = str(tmp_path / "var")
        result = subprocess.run(
            [sys.executable, "manage.py", "demo", "--port", str(port), "--exit-when-done"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
    assert result.returncode != 0
    assert f"port {port} is in use" in result.stderr
