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


def test_demo_serves_the_dashboard_until_ctrl_c(tmp_path):
    import signal
    import time

    import httpx

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["STEERBOARD_VAR_DIR"] = str(tmp_path / "var")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(free_port())],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 180
        while not any("TEAM_WORKFLOW_OK" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        out = "".join(lines)
        url = re.search(r"dashboard\s+(http://\S+)", out).group(1)
        user, password = re.search(r"login\s+(\S+) / (\S+)", out).groups()
        with httpx.Client(base_url=url.split("/teams/")[0], timeout=30) as browser:
            browser.get("/login/")
            login = browser.post(
                "/login/",
                data={"username": user, "password": password, "csrfmiddlewaretoken": browser.cookies.get("csrftoken")},
                headers={"Referer": url},
            )
            assert login.status_code in (200, 302)
            page = browser.get(url)
            assert page.status_code == 200
        time.sleep(1)
        assert proc.poll() is None, "the demo keeps running after the workflow"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        with pytest.raises(httpx.ConnectError):  # daphne went with it
            httpx.get(url, timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    log_dir = tmp_path / "var" / "demo-logs"
    assert {p.name for p in log_dir.iterdir()} == {"daphne.log", "host.log"}
