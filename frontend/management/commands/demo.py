"""``manage.py demo``: the whole thing on one machine, the main job.

Migrates, starts daphne on the embedded default, starts the team host with the
keyless model, creates a fresh demo team (a new name each run, so it can be
started again on the same database), asks the Lead by a human prompt to run
the team workflow (the server asks the host to resume the Lead for it, and the
Lead spawns its teammates through the same host), and prints the dashboard URL
and a login. Runs until Ctrl-C; with ``--exit-when-done`` exits 0 once the Lead's
``TEAM_WORKFLOW_OK`` is in its history (non-zero, with the reason, on a
failure or after ``--timeout`` seconds).

Everything after the setup goes over the wire, as any other client would.
"""
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from io import StringIO
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from teams.errors import TeamError
from teams.services import team_create

ROOT = Path(settings.BASE_DIR)
KICKOFF = "Run the team workflow: spawn the researcher and the implementer and report when both tasks are done."


class DemoFailed(Exception):
    pass


class Command(BaseCommand):
    help = "Run the server, the dashboard, the team host and a keyless demo team (Ctrl-C stops it)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--bind", default="127.0.0.1", help="address daphne listens on")
        parser.add_argument("--exit-when-done", action="store_true", help="exit 0 once the Lead says TEAM_WORKFLOW_OK")
        parser.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (exit 1)")

    def handle(self, *args, port, bind, exit_when_done, timeout, **options):
        self.children: list[tuple[str, subprocess.Popen]] = []
        signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            code = self._run(port=port, bind=bind, exit_when_done=exit_when_done, timeout=timeout)
        except KeyboardInterrupt:
            self.stdout.write("\nstopping")
            code = 0
        except DemoFailed as exc:
            self.stderr.write(f"demo failed: {exc}")
            code = 1
        finally:
            self._stop_children()
        sys.exit(code)

    def _on_sigterm(self, *_):
        raise KeyboardInterrupt

    # --- the run ------------------------------------------------------------------------------
    def _run(self, *, port: int, bind: str, exit_when_done: bool, timeout: float | None) -> int:
        started = time.monotonic()
        call_command("migrate", verbosity=0, interactive=False)
        if not _port_free(bind, port):
            raise DemoFailed(f"port {port} is in use; pass --port with a free one")
        team, lead_token, host_token = self._team()
        password = secrets.token_urlsafe(9)
        out = StringIO()
        call_command("operator_create", "demo", password=password, json=True, stdout=out)
        import json

        operator = json.loads(out.getvalue())
        connections.close_all()  # the children own the database from here

        server = f"http://127.0.0.1:{port}"
        logs = Path(settings.VAR_DIR) / "demo-logs"
        logs.mkdir(parents=True, exist_ok=True)
        # Daphne's own timeouts as docs/deployment.md ("Slow and huge clients") sets them.
        timeouts = ["--http-timeout", "3700", "--ping-interval", "20", "--ping-timeout", "30"]
        self._spawn(
            "daphne", [sys.executable, "-m", "daphne", "-b", bind, "-p", str(port), *timeouts, "config.asgi:application"], logs
        )
        self._wait_ready(server, timeout=60)
        agents = [sys.executable, "-m", "agents"]
        self._spawn("host", [*agents, "host", "--server", server, "--token", host_token, "--model", "keyless"], logs)
        # No session of the Lead's own: the kickoff prompt makes the server ask the
        # host to resume the Lead, as it would for any member without a session.

        response = httpx.post(
            f"{server}/api/v1/teams/{team}/prompts",
            json={"target": "lead", "content": KICKOFF},
            headers={"Authorization": f"Token {operator['token']}"},
            timeout=30,
        )
        if response.status_code != 201:
            raise DemoFailed(f"the kickoff prompt was refused: {response.status_code} {response.text[:500]}")

        self.stdout.write(
            f"\nSteerboard demo\n"
            f"  dashboard  {server}/teams/{team}/\n"
            f"  login      {operator['username']} / {password}\n"
            f"  team       {team} (Lead token {lead_token})\n"
            f"  logs       {logs}\n"
            + ("" if exit_when_done else "Ctrl-C stops it.\n")
        )
        self.stdout.flush()

        reported = False
        while True:
            for name, proc in self.children:
                if proc.poll() is not None:
                    raise DemoFailed(f"{name} exited with {proc.returncode}; see {logs / (name + '.log')}")
            if not reported and _workflow_ok(server, lead_token):
                reported = True
                self.stdout.write("TEAM_WORKFLOW_OK: the Lead reports both tasks completed.")
                self.stdout.flush()
                if exit_when_done:
                    return 0
            if timeout is not None and time.monotonic() - started > timeout:
                if reported:
                    return 0
                raise DemoFailed(f"no TEAM_WORKFLOW_OK from the Lead within {timeout:g}s; see {logs}")
            time.sleep(0.5)

    def _team(self) -> tuple[str, str, str]:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        name = f"demo-{stamp}"
        for _ in range(10):
            try:
                team, _lead, lead_token, host_token = team_create(name=name)
                return team.name, lead_token, host_token
            except TeamError:
                name = f"demo-{stamp}-{secrets.token_hex(2)}"
        raise DemoFailed("could not find a free team name")

    # --- children -----------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], logs: Path) -> None:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings")}
        log = open(logs / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append((name, proc))

    def _wait_ready(self, server: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            daphne = self.children[0][1]
            if daphne.poll() is not None:
                raise DemoFailed(f"daphne exited with {daphne.returncode} before it answered")
            try:
                if httpx.get(server + "/api/v1/tools", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise DemoFailed(f"daphne did not answer on {server} within {timeout:g}s")

    def _stop_children(self) -> None:
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _, proc in reversed(self.children):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _port_free(bind: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne does: TIME_WAIT is no obstacle
        try:
            s.bind((bind, port))
        except OSError:
            return False
    return True


def _workflow_ok(server: str, lead_token: str) -> bool:
    """Is TEAM_WORKFLOW_OK in the Lead's durable history? Read it as the Lead would."""
    after = 0
    try:
        while True:
            response = httpx.get(
                f"{server}/api/v1/session/history",
                params={"after": after, "limit": 1000},
                headers={"Authorization": f"Bearer {lead_token}"},
                timeout=10,
            )
            if response.status_code != 200:
                return False
            page = response.json()
            if any(e.get("kind") == "assistant_text" and "TEAM_WORKFLOW_OK" in e.get("text", "") for e in page["entries"]):
                return True
            if page["next_after"] is None:
                return False
            after = page["next_after"]
    except httpx.HTTPError:
        return False
