"""The main job: ``python manage.py demo``, run as a newcomer runs it (a subprocess), with a real
browser where the demo waits for one. Its --help and its refusals before it starts anything are
tests/test_demo_command.py's, in this process."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.support.live import ROOT, embedded_run_only, free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    # The demo runs on the embedded default whatever the run is on (demo_env): once is enough.
    embedded_run_only("the demo on the embedded default"),
]

FAST = ("--no-wait", "--step-delay", "0")


def demo_env(var_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["STEERBOARD_VAR_DIR"] = str(var_dir)
    return env


def demo(var_dir, *args, timeout=240):
    return subprocess.run(
        [sys.executable, "manage.py", "demo", "--port", str(free_port()), *args],
        cwd=ROOT,
        env=demo_env(var_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class RunningDemo:
    """``manage.py demo`` left running; its stdout read line by line on a thread."""

    def __init__(self, var_dir, *args):
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(free_port()), *args],
            cwd=ROOT, env=demo_env(var_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            # As in a terminal, Ctrl-C (SIGINT) reaches it: a test run started in the background
            # (nohup, `&`) ignores SIGINT, and its children would inherit that.
            preexec_fn=_sigint_default,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def out(self) -> str:
        return "".join(line for _, line in self.lines)

    def ended_out(self) -> str:
        """All it printed, once it has ended (its stdout read to the end)."""
        self._reader.join(30)
        return self.out()

    def wait_for(self, text: str, timeout: float = 180) -> float:
        """When the first line containing ``text`` came (monotonic)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            assert self.proc.poll() is None or any(text in line for _, line in self.lines), self.out()
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not printed within {timeout}s:\n{self.out()}")

    def login(self) -> tuple[str, str, str]:
        out = self.out()
        url = re.search(r"dashboard\s+(http://\S+)", out).group(1)
        user, password = re.search(r"login\s+(\S+) / (\S+)", out).groups()
        return url, user, password

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def signed_in(url: str, user: str, password: str) -> httpx.Client:
    browser = httpx.Client(base_url=url.split("/teams/")[0], timeout=30)
    browser.get("/login/")
    login = browser.post(
        "/login/",
        data={"username": user, "password": password, "csrfmiddlewaretoken": browser.cookies.get("csrftoken")},
        headers={"Referer": url},
    )
    assert login.status_code == 302, login.text[:500]
    return browser


def test_demo_waits_for_a_browser_on_the_team_page_then_paces_the_team(tmp_path):
    from playwright.sync_api import sync_playwright

    from tests.support.chromium import launch_chromium

    running = RunningDemo(tmp_path / "var", "--step-delay", "0.3")
    try:
        running.wait_for("Waiting for a browser")
        url, user, password = running.login()
        assert "Kickoff" not in running.out(), "nobody is looking yet"
        with sync_playwright() as playwright:
            chromium = launch_chromium(playwright)
            page = chromium.new_page()
            page.set_default_timeout(30_000)
            page.goto(url)  # not signed in: the login page, which comes back here
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(url)
            kickoff = running.wait_for("Kickoff", timeout=60)
            assert "A browser is on the team page." in running.out()
            done = running.wait_for("TEAM_WORKFLOW_OK", timeout=180)
            # Paced: some twenty steps one after another, each at least 0.3 s.
            assert done - kickoff > 6, f"the workflow took {done - kickoff:.1f}s"
            chromium.close()
    finally:
        assert running.stop() == 0
    # It waited for the browser: daphne logged the team page's websocket before the kickoff prompt.
    team = re.search(r"/teams/([^/]+)/", url).group(1)
    access = (tmp_path / "var" / "demo-logs" / "access.log").read_text().splitlines()
    viewer = next(i for i, line in enumerate(access) if f'"WSCONNECT /ws/dashboard/{team}/"' in line)
    kicked = next(i for i, line in enumerate(access) if f'"POST /api/v1/teams/{team}/prompts"' in line)
    assert viewer < kicked, "\n".join(access)


def test_without_a_browser_the_demo_waits_until_its_timeout_and_says_why(tmp_path):
    result = demo(tmp_path / "var", "--timeout", "3", timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no browser opened the team page within 3s (pass --no-wait to start at once)" in result.stderr
    assert "Kickoff" not in result.stdout and "Waiting for a browser" in result.stdout


def test_demo_says_what_it_does_exits_0_once_the_lead_reports_and_runs_again_on_the_same_database_and_team(tmp_path):
    """Three runs on one database: a new team, then ``--team again`` (a new team by that name)
    exiting when done, then ``--team again`` left running (the workflow again in that team)."""
    teams, logins = [], []
    for args in ((), ("--team", "again")):
        result = demo(tmp_path / "var", *FAST, *args, "--exit-when-done", "--timeout", "180")
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert "TEAM_WORKFLOW_OK" in out
        # Progress first, then the URL and the login, then the kickoff: the first URL printed is the dashboard's.
        order = ["loading Django", "preparing the database", "Starting the server", "Starting the team host",
                 "dashboard ", "login ", "Kickoff", "TEAM_WORKFLOW_OK"]
        positions = [out.index(text) for text in order]
        assert positions == sorted(positions), out
        assert out.index("http://") == out.index("dashboard ") + len("dashboard  "), out
        url = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+/teams/([a-z0-9_-]+)/)", out)
        assert url, out
        teams.append(url.group(2))
        logins.append(re.search(r"login\s+(.*)", out).group(1))
    assert teams[0] != teams[1] == "again"
    assert re.fullmatch(r"demo / \S+ \(shown this once: later runs keep it\)", logins[0]), logins[0]
    assert "the password printed by the first demo run" in logins[1], logins[1]
    assert logins[0].split()[2] not in logins[1], "a rerun must not print (or set) a new password"
    assert (tmp_path / "var" / "steerboard.sqlite3").exists()
    assert "Creating the team again" in out
    assert "Run it again in this team: bash scripts/demo.sh --team again" in out

    again = RunningDemo(tmp_path / "var", *FAST, "--team", "again")
    try:
        again.wait_for("TEAM_WORKFLOW_OK")
        out = again.out()
        assert "Using the existing team again" in out and "the workflow runs again in it" in out
        assert re.search(r"dashboard\s+http://127\.0\.0\.1:\d+/teams/again/", out), out
        # The second round worked on new tasks, on the same board, in the same team.
        server = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)/", out).group(1)
        lead_token = re.search(r"Lead token (\S+)\)", out).group(1)
        board = httpx.post(f"{server}/api/v1/tools/team_task_list", json={},
                           headers={"Authorization": f"Bearer {lead_token}"}, timeout=30)
        assert board.status_code == 200, board.text
        tasks = board.json()["tasks"]
        assert [(t["id"], t["status"]) for t in tasks] == [(f"task-{n}", "completed") for n in range(1, 5)]
    finally:
        assert again.stop() == 0


def test_demo_serves_the_dashboard_until_ctrl_c_and_a_rerun_keeps_the_operator_signed_in(tmp_path):
    """One demo left running; two more runs on its database while it serves (the second with
    --password); then Ctrl-C ends it, and its server with it."""
    first = RunningDemo(tmp_path / "var", *FAST)
    try:
        first.wait_for("TEAM_WORKFLOW_OK")
        url, user, password = first.login()
        browser = signed_in(url, user, password)
        assert browser.get(url).status_code == 200
        assert first.proc.poll() is None, "the demo keeps running after the workflow"
        again = demo(tmp_path / "var", *FAST, "--exit-when-done", "--timeout", "180")
        assert again.returncode == 0, again.stdout + again.stderr
        page = browser.get(url)
        assert page.status_code == 200, "the earlier run's browser was signed out"
        signed_in(url, user, password).close()  # the password still works
        chosen = demo(tmp_path / "var", *FAST, "--password", "a-chosen-demo-pass-42", "--exit-when-done", "--timeout", "180")
        assert chosen.returncode == 0, chosen.stdout + chosen.stderr
        assert "login      demo / a-chosen-demo-pass-42\n" in chosen.stdout
        signed_in(url, user, "a-chosen-demo-pass-42").close()
        browser.close()
        assert first.proc.poll() is None, "the demo keeps running after the workflow"
    finally:
        assert first.stop() == 0
    # ... and Ctrl-C found it still in its loop: it had not returned once the workflow was done.
    assert "\nstopping" in first.ended_out(), first.out()
    with pytest.raises(httpx.ConnectError):  # daphne went with it
        httpx.get(url, timeout=5)
    log_dir = tmp_path / "var" / "demo-logs"
    assert {p.name for p in log_dir.iterdir()} == {"daphne.log", "host.log", "access.log"}
    host_log = (log_dir / "host.log").read_text()
    assert "lead: turn " in host_log and "researcher: steer received" in host_log, host_log[-3000:]
