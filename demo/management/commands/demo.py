"""``manage.py demo``: the whole thing on one machine, the main job.

Says what it does as it goes: migrates, makes sure of the demo operator, creates
the team, starts daphne on the embedded default and the team host with the
keyless model, then prints the dashboard URL and the login, and waits until a
browser opens that team page (``--no-wait`` skips the wait). Only then does it
ask the Lead, by a human prompt, to run the team workflow (the server asks the
host to resume the Lead for it, and the Lead spawns its teammates through the
same host). The keyless model waits ``--step-delay`` seconds (default 1.5) before
each step, so a person sees the messages and the task board move.

Each run creates a new team ``demo-<time>``; ``--team NAME`` uses that team
instead, and when it exists runs the workflow again in it (a ``[next round]``
prompt: sdk/steerboard_agents/keyless.py). The demo operator ``demo`` is created once per
database with a random password printed that once; later runs keep it (and
every browser signed in with it), ``--password`` sets a new one.

``--model`` runs the team on a real model instead (``openai:<model>``,
``anthropic:<model>``, per member as ``lead=...``; repeatable, as ``python -m
steerboard_agents host --model``): the host gets the same values, the vendors' keys and
endpoints come from the environment (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``,
``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``), and the kickoff prompt spells
the workflow out, since a real model has no script: spawn a researcher and an
implementer, one task each on the board, the second blocked by the first, and
``TEAM_WORKFLOW_OK`` once both are completed. ``--step-delay`` paces keyless
members only.

Runs until Ctrl-C; with ``--exit-when-done`` exits 0 once the Lead's
``TEAM_WORKFLOW_OK`` for this run's prompt is in its history (non-zero, with
the reason, on a failure or after ``--timeout`` seconds).

How it knows a browser is looking: daphne writes its access log to
``demo-logs/access.log``, and the team page's dashboard websocket
(``/ws/dashboard/<team>/``) is logged there with ``WSCONNECT`` once it is
accepted. The socket only opens from a rendered team page, which needs a login.

Everything after the setup goes over the wire, as any other client would.
"""
import json
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
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from accounts.operators import is_operator
from accounts.tokens import operator_token_create
from demo.daphne_process import DEPLOYMENT_TIMEOUTS, DaphneFailed, DaphneProcess
from steerboard_agents.registry import NAMES, member_and_name, models_choose
from teams.errors import TeamError
from teams.models import Member, Role, Team
from teams.services import member_token_create, team_create, team_host_token_replace

ROOT = Path(settings.BASE_DIR)
OPERATOR = "demo"
KICKOFF = "Run the team workflow: spawn the researcher and the implementer and report when both tasks are done."
# sdk/steerboard_agents/keyless.py: a prompt with this marker runs the workflow again with the teammates already there.
KICKOFF_AGAIN = "[next round] Run the team workflow again: the researcher and the implementer take a new task each."
# A real model has no script: its kickoff says what the keyless Lead knows by heart.
REAL_KICKOFF = (
    "Run the team workflow. Spawn two teammates: `researcher` (finds out what a small feature needs) and "
    "`implementer` (builds it). The researcher creates task-1 on the team board, claims it, writes a short note "
    "and completes it; the implementer creates task-2 blocked by task-1, and claims and completes it once task-1 "
    "is completed. Each tells you when their task is done. Wait for them; when both tasks are completed on the "
    "board, give your final answer and end it with TEAM_WORKFLOW_OK."
)
REAL_KICKOFF_AGAIN = (
    "Run the team workflow again with the teammates you already have, `researcher` and `implementer` (message "
    "them; do not spawn them again): one new task each on the board, the implementer's blocked by the "
    "researcher's. When both new tasks are completed, give your final answer and end it with TEAM_WORKFLOW_OK."
)


class DemoFailed(Exception):
    pass


class Command(BaseCommand):
    help = (
        "Run the server, the dashboard, the team host and a keyless demo team you can watch: "
        "prints the dashboard URL and login, waits for a browser to open the team page, then starts the "
        "workflow (Ctrl-C stops it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="the port daphne listens on (default 8000)")
        parser.add_argument("--bind", default="127.0.0.1", help="the address daphne listens on (default 127.0.0.1)")
        parser.add_argument(
            "--team",
            help="use this team: created when it does not exist, else the workflow runs again in it "
            "(default: a new team demo-<time>)",
        )
        parser.add_argument(
            "--password",
            help=f"set the password of the demo operator {OPERATOR!r} (default: a random one on the first run, "
            "printed once and kept by later runs)",
        )
        parser.add_argument(
            "--step-delay",
            type=float,
            default=1.5,
            metavar="SECONDS",
            help="the keyless model waits this long before each step, and messages wait as long at the step "
            "boundary, so you can watch (default 1.5: about 40 s of work; 0: full speed)",
        )
        parser.add_argument(
            "--model",
            action="append",
            metavar="[MEMBER=]NAME",
            help=f"run the team on this model, as python -m steerboard_agents host --model does: {NAMES}; MEMBER=NAME for "
            "one member; repeatable (default: the keyless scripted team). The vendors' keys and endpoints come from "
            "OPENAI_API_KEY / OPENAI_BASE_URL and ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL",
        )
        parser.add_argument(
            "--no-wait", action="store_true", help="start the workflow at once, not when a browser opens the team page"
        )
        parser.add_argument("--exit-when-done", action="store_true", help="exit 0 once the Lead says TEAM_WORKFLOW_OK")
        parser.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (exit 1)")

    def handle(self, *args, **options):
        if options["step_delay"] < 0:
            raise CommandError("--step-delay cannot be negative")
        self.children: list[tuple[str, subprocess.Popen]] = []
        signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            code = self._run(**options)
        except KeyboardInterrupt:
            self._say("\nstopping")
            code = 0
        except DemoFailed as exc:
            self.stderr.write(f"demo failed: {exc}")
            code = 1
        finally:
            self._stop_children()
        sys.exit(code)

    def _on_sigterm(self, *_):
        raise KeyboardInterrupt

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    # --- the run ------------------------------------------------------------------------------
    def _run(self, *, port, bind, team, password, step_delay, no_wait, exit_when_done, timeout, model=None, **_) -> int:
        started = time.monotonic()
        models = list(model or [])
        try:
            models_choose(models)  # a name that cannot be used, a missing key or SDK: said now, before anything starts
        except ValueError as exc:
            raise CommandError(f"--model: {exc}")
        named = [member_and_name(value) for value in models]
        # --step-delay paces the keyless members: everyone without --model, the named ones, and
        # every member without a model of its own when no default (NAME or *=NAME) is given.
        keyless = any(name == "keyless" for _, name in named) or all(member != "*" for member, _ in named)
        database = settings.DATABASES["default"]
        where = database["NAME"]
        if not database["ENGINE"].endswith("sqlite3"):
            where = f"{database['ENGINE'].rsplit('.', 1)[-1]} database {where}"
        self._say(f"Steerboard demo: preparing the database ({where}) ...")
        call_command("migrate", verbosity=0, interactive=False)
        if not _port_free(bind, port):
            raise DemoFailed(f"port {port} is in use; pass --port with a free one")
        login, operator_token = self._operator(password)
        team, lead_token, host_token, again = self._team(team)
        connections.close_all()  # the children own the database from here

        server = f"http://127.0.0.1:{port}"
        self.server, self.lead_token = server, lead_token
        logs = Path(settings.VAR_DIR) / "demo-logs"
        logs.mkdir(parents=True, exist_ok=True)
        access_log = logs / "access.log"
        seen_from = access_log.stat().st_size if access_log.exists() else 0
        self._say(f"Starting the server (daphne) on {bind}:{port} ...")
        # The project's daphne (frontend/daphne_process.py), with its own timeouts as
        # docs/deployment.md ("Slow and huge clients") sets them.
        daphne = DaphneProcess(port=port, bind=bind, env=self._child_env(), log_path=logs / "daphne.log",
                               args=("--access-log", str(access_log), *DEPLOYMENT_TIMEOUTS))
        self.children.append(("daphne", daphne.spawn()))
        try:
            daphne.wait_ready(timeout=60)
        except DaphneFailed as exc:
            raise DemoFailed(f"{exc.reason}; see {logs / 'daphne.log'}")
        # -v: host.log tells each session's steers, turns and entries as they happen.
        host = [sys.executable, "-m", "steerboard_agents", "host", "--server", server, "-v"]
        if models:
            self._say(f"Starting the team host (models: {', '.join(models)}) ...")
            host += [arg for value in models for arg in ("--model", value)]
        else:
            self._say(f"Starting the team host (keyless model, {step_delay:g} s per step) ...")
            host += ["--model", "keyless"]
        if keyless:
            host += ["--step-delay", str(step_delay)]
        # The host token goes in the environment: a command line is visible to every user (ps).
        self._spawn("host", host, logs, env={"STEERBOARD_TOKEN": host_token})
        # No session of the Lead's own: the kickoff prompt makes the server ask the
        # host to resume the Lead, as it would for any member without a session.

        page = f"{server}/teams/{team}/"
        self._say(
            f"\nSteerboard demo\n"
            f"  dashboard  {page}\n"
            f"  login      {login}\n"
            f"  team       {team}{' (the workflow runs again in it)' if again else ''} (Lead token {lead_token})\n"
            f"  logs       {logs}\n"
            + ("" if exit_when_done else "Ctrl-C stops it.\n")
        )
        if not no_wait:
            self._say("Waiting for a browser to open the dashboard URL above (--no-wait starts at once) ...")
            self._wait_for_viewer(access_log, seen_from, team, started, timeout, logs)
            self._say("A browser is on the team page.")

        response = httpx.post(
            f"{server}/api/v1/teams/{team}/prompts",
            json={"target": "lead", "content": _kickoff(again, real=bool(models))},
            headers={"Authorization": f"Token {operator_token}"},
            timeout=30,
        )
        if response.status_code != 201:
            raise DemoFailed(f"the kickoff prompt was refused: {response.status_code} {response.text[:500]}")
        prompt_id = response.json()["prompt"]["id"]
        self._say("Kickoff: the Lead is asked to run the team workflow; watch it on the dashboard.")

        reported = False
        while True:
            self._check_children(logs)
            if not reported and _workflow_ok(server, lead_token, prompt_id):
                reported = True
                self._say("TEAM_WORKFLOW_OK: the Lead reports both tasks completed.")
                self._say(f"Run it again in this team: bash scripts/demo.sh --team {team}")
                if exit_when_done:
                    return 0
            if timeout is not None and time.monotonic() - started > timeout:
                if reported:
                    return 0
                raise DemoFailed(f"no TEAM_WORKFLOW_OK from the Lead within {timeout:g}s; see {logs}")
            time.sleep(0.5)

    def _operator(self, password: str | None) -> tuple[str, str]:
        """The one demo operator of this database: (the login line to print, a REST token for the kickoff).

        Created on the first run with a random password, printed that once. Later runs
        leave its password (and so every browser signed in with it) alone, unless
        ``--password`` sets a new one.
        """
        user = get_user_model().objects.filter(username=OPERATOR).first()
        if user is None or password:
            self._say(f"{'Setting the password of' if user else 'Creating'} the demo operator {OPERATOR!r} ...")
            new_password = password or secrets.token_urlsafe(9)
            out = StringIO()
            try:
                call_command("operator_create", OPERATOR, password=new_password, json=True, stdout=out)
            except CommandError as exc:
                raise DemoFailed(f"cannot set that password: {exc}")
            kept = "" if password else " (shown this once: later runs keep it)"
            return f"{OPERATOR} / {new_password}{kept}", json.loads(out.getvalue())["token"]
        if not is_operator(user):
            raise DemoFailed(f"the user {OPERATOR!r} exists and is not an operator; pass --password to make it one")
        login = f"{OPERATOR} / the password printed by the first demo run (kept; --password NEW sets another)"
        return login, operator_token_create(user=user)

    def _team(self, name: str | None) -> tuple[str, str, str, bool]:
        """(team, a Lead token, the host token, whether the team was there already)."""
        if name is not None:
            found = Team.objects.filter(name=name).first()
            if found is not None:
                self._say(f"Using the existing team {name} (it gets a new host token) ...")
                lead = Member.objects.get(team=found, role=Role.LEAD)
                return name, member_token_create(member=lead), team_host_token_replace(team=found), True
            try:
                self._say(f"Creating the team {name} ...")
                _team, _lead, lead_token, host_token = team_create(name=name)
            except TeamError as exc:
                raise DemoFailed(f"{exc.code}: {exc.message}")
            return name, lead_token, host_token, False
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        name = f"demo-{stamp}"
        for _ in range(10):
            try:
                _team, _lead, lead_token, host_token = team_create(name=name)
                self._say(f"Created the team {name} ...")
                return name, lead_token, host_token, False
            except TeamError:
                name = f"demo-{stamp}-{secrets.token_hex(2)}"
        raise DemoFailed("could not find a free team name")

    def _wait_for_viewer(self, access_log: Path, offset: int, team: str, started: float, timeout, logs: Path) -> None:
        """Until daphne logs an accepted dashboard websocket of this team's page (after ``offset``)."""
        wanted = f'"WSCONNECT /ws/dashboard/{team}/"'
        while True:
            self._check_children(logs)
            if access_log.exists():
                with open(access_log, "rb") as f:
                    f.seek(offset)
                    if wanted.encode() in f.read():
                        return
            if timeout is not None and time.monotonic() - started > timeout:
                raise DemoFailed(f"no browser opened the team page within {timeout:g}s (pass --no-wait to start at once)")
            time.sleep(0.3)

    # --- children -----------------------------------------------------------------------------
    @staticmethod
    def _child_env(env: dict | None = None) -> dict:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings"),
            **(env or {}),
        }

    def _spawn(self, name: str, argv: list[str], logs: Path, env: dict | None = None) -> None:
        log = open(logs / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, cwd=ROOT, env=self._child_env(env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.children.append((name, proc))

    def _wait_sessions_ended(self, timeout: float = 5.0) -> None:
        """Until the roster shows no member running or idle (read as the Lead), at most ``timeout``."""
        if not getattr(self, "lead_token", None):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                response = httpx.post(
                    f"{self.server}/api/v1/tools/list_agents",
                    json={},
                    headers={"Authorization": f"Bearer {self.lead_token}"},
                    timeout=2,
                )
                agents = response.json()["agents"] if response.status_code == 200 else []
            except (httpx.HTTPError, ValueError, KeyError):
                return
            if not any(a["status"] in ("running", "idle") for a in agents):
                return
            time.sleep(0.1)

    def _check_children(self, logs: Path) -> None:
        for name, proc in self.children:
            if proc.poll() is not None:
                raise DemoFailed(f"{name} exited with {proc.returncode}; see {logs / (name + '.log')}")

    def _stop_children(self) -> None:
        """The host first, then daphne once it has recorded the sessions' ends: a member
        left ``running`` on a dead server would wait for the reaper (30 s) in the next run."""
        host = dict(self.children).get("host")
        if host is not None and host.poll() is None:
            os.killpg(host.pid, signal.SIGTERM)
            try:
                host.wait(10)
            except subprocess.TimeoutExpired:
                pass
            else:
                self._wait_sessions_ended()
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


def _kickoff(again: bool, real: bool) -> str:
    if real:
        return REAL_KICKOFF_AGAIN if again else REAL_KICKOFF
    return KICKOFF_AGAIN if again else KICKOFF


def _port_free(bind: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne does: TIME_WAIT is no obstacle
        try:
            s.bind((bind, port))
        except OSError:
            return False
    return True


def _workflow_ok(server: str, lead_token: str, prompt_id) -> bool:
    """Is TEAM_WORKFLOW_OK in the Lead's durable history, after this run's prompt? Read it as the Lead would."""
    after, prompted = 0, False
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
            for entry in page["entries"]:
                if entry.get("kind") == "prompt" and str(entry.get("prompt_id")) == str(prompt_id):
                    prompted = True
                elif prompted and entry.get("kind") == "assistant_text" and "TEAM_WORKFLOW_OK" in entry.get("text", ""):
                    return True
            if page["next_after"] is None:
                return False
            after = page["next_after"]
    except httpx.HTTPError:
        return False
