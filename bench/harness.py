"""Servers for the benchmarks, started the way an operator starts them
(docs/operations.md, docs/deployment.md), and a team provisioned through the
product's public surfaces only.

- ``Environment``: one database (a fresh SQLite file, or a new PostgreSQL
  database with a Redis channel prefix of its own) and the environment
  variables every process of the run shares (``DATABASE_URL``, ``REDIS_URL``,
  ``SECRET_KEY``, ``STEERBOARD_*``); ``manage.py migrate`` on it; ``manage.py``
  commands (``team_create``, ``operator_create``, ``delivery_audit``) with it.
- ``Server``: ``python -m daphne -b 127.0.0.1 -p PORT config.asgi:application``
  with that environment, ready once ``/readyz`` answers 200: the project's one daphne
  launcher (demo/daphne_process.py, shared with ``manage.py demo`` and the tests), on a
  port claimed there (no other process can be handed it meanwhile).
- ``provision_teams``: many teams at once, each made with ``POST /api/v1/teams`` as an
  operator, then provisioned as below.
- ``provision``: ``manage.py team_create --json``; the bench holds the team's
  host socket (``/ws/host/``, docs/protocol.md) while the Lead spawns N
  teammates over REST with the SDK's ``ServerClient``; each ``start`` frame
  carries a member token, and the teammate's session says ``hello`` once
  with it (so it is no longer provisioning and no host is asked again), then
  leaves until the benchmark's own session connects. Then the host leaves.

Nothing here imports the server's code but that launcher (Django-free); every loop is
bounded in time.
"""
import asyncio
import concurrent.futures
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo.daphne_process import DaphneProcess, port_claim  # noqa: E402
from steerboard_agents.client import ServerClient  # noqa: E402

PG_URL_DEFAULT = "postgres://postgres@127.0.0.1:5432/steerboard"
REDIS_URL_DEFAULT = "redis://127.0.0.1:6379/0"


def free_port() -> int:
    """A port no other process claiming ports on this machine is handed meanwhile."""
    return port_claim()


class Environment:
    """One database and the settings of every process of a run (``scale_out``: PostgreSQL + Redis)."""

    def __init__(self, tmp: Path, *, scale_out: bool, **settings: str):
        self.tmp = tmp
        self.postgres = scale_out
        # The backend is the benchmark's choice, never the shell's.
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
        self.env.update({
            "SECRET_KEY": "bench-" + secrets.token_urlsafe(40),  # one per run, the same on every process
            "PYTHONUNBUFFERED": "1",
            "STEERBOARD_VAR_DIR": str(tmp / "var"),
        })
        if scale_out:
            base = os.environ.get("STEERBOARD_PG_URL", PG_URL_DEFAULT)
            self._admin = base.rsplit("/", 1)[0] + "/postgres"
            self.db_name = f"steerboard_bench_{uuid.uuid4().hex[:10]}"
            self._sql_admin(f'CREATE DATABASE "{self.db_name}"')
            self.env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + self.db_name
            self.env["REDIS_URL"] = os.environ.get("STEERBOARD_REDIS_URL", REDIS_URL_DEFAULT)
            self.env["STEERBOARD_CHANNEL_PREFIX"] = f"bench{uuid.uuid4().hex[:8]}:"
        else:
            self.db_name = ""
            self.env["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
        self.env.update(settings)
        self.manage("migrate", "-v0")

    def _sql_admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(sql)

    def manage(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=self.env,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed: {result.stderr[-2000:]}")
        return result

    def manage_json(self, *args: str, check: bool = True) -> dict:
        return json.loads(self.manage(*args, "--json", check=check).stdout)

    def query(self, sql: str) -> list[tuple]:
        """Read the run's database directly: for the benchmarks' own fixtures (bench/growth.py's
        bulk insert), never for a figure of the server."""
        url = self.env["DATABASE_URL"]
        if self.postgres:
            import psycopg

            with psycopg.connect(url) as conn:
                return list(conn.execute(sql).fetchall())
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)
        try:
            return list(conn.execute(sql).fetchall())
        finally:
            conn.close()

    def close(self) -> None:
        if self.postgres:
            try:
                self._sql_admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            except Exception as exc:  # a leftover database is no reason to fail the run
                print(f"  (could not drop {self.db_name}: {exc})")


class Server(DaphneProcess):
    """One daphne process serving config.asgi:application (demo/daphne_process.py)."""

    def __init__(self, environment: Environment, port: int | None = None):
        self.environment = environment
        port = port or free_port()
        super().__init__(port=port, env=environment.env, log_path=environment.tmp / f"daphne-{port}.log",
                         ready_path="/readyz")

    def start(self, timeout: float = 60) -> "Server":
        return super().start(timeout)

    def stop(self, timeout: float = 15) -> None:
        super().stop(timeout)


# --- a team ------------------------------------------------------------------------------------------
def provision(environment: Environment, server: Server, team: str, members: int, operator: str = "") -> dict:
    """A team with teammates m0..m<N-1>: {"team", "lead", "host", "members": {name: token}[, "operator"]}."""
    created = environment.manage_json("team_create", team)
    out = {"team": team, "lead": created["lead"]["token"], "host": created["host_token"]}
    names = [f"m{i}" for i in range(members)]
    # Its own thread and event loop: a benchmark may call this from inside its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        out["members"] = pool.submit(asyncio.run, _teammates(server, out["lead"], out["host"], names)).result()
    if operator:
        password = "pw-" + operator
        made = environment.manage_json("operator_create", operator, "--password", password, "--skip-password-validation")
        out["operator"] = {"username": operator, "password": password, "token": made["token"]}
    return out


def provision_teams(environment: Environment, server: Server, teams: list[str], members: int,
                    concurrency: int = 8) -> dict[str, dict[str, str]]:
    """Many teams of teammates m0..m<N-1>, made as an operator makes them: ``POST /api/v1/teams``
    with an operator's token (one ``operator_create``, not a ``manage.py`` process per team), then
    each team's Lead spawns its teammates as in ``provision``. Answers {team: {member: token}}."""
    password = "pw-" + secrets.token_urlsafe(12)
    made = environment.manage_json("operator_create", "teamsop", "--password", password, "--skip-password-validation")
    names = [f"m{i}" for i in range(members)]

    async def all_teams() -> dict[str, dict[str, str]]:
        limit = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                     headers={"Authorization": f"Token {made['token']}"}) as http:
            async def one(team: str) -> tuple[str, dict[str, str]]:
                async with limit:
                    r = await http.post("/api/v1/teams", json={"name": team})
                    if r.status_code != 201:
                        raise RuntimeError(f"POST /api/v1/teams {team}: {r.status_code} {r.text[:300]}")
                    created = r.json()
                    return team, await _teammates(server, created["lead"]["token"], created["host_token"], names)

            return dict(await asyncio.gather(*(one(t) for t in teams)))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, all_teams()).result()


async def _teammates(server: Server, lead_token: str, host_token: str, names: list[str], timeout: float = 600) -> dict:
    latest: dict[str, str] = {}  # member -> the token of its latest start (a later start revokes the earlier)
    welcomed: dict[str, str] = {}  # member -> the token its session said hello with
    hellos: set[asyncio.Task] = set()
    auth = {"Authorization": f"Bearer {host_token}"}

    async def hello_once(member: str, token: str) -> None:
        try:
            async with websockets.connect(server.ws_url + "/ws/agent/", open_timeout=30,
                                          additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                await ws.send(json.dumps({"type": "hello", "status": "idle"}))
                async for raw in ws:
                    if json.loads(raw).get("type") == "welcome":
                        welcomed[member] = token
                        return
        except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError):
            pass  # refused (a later start replaced the token) or dropped: the latest token is tried below

    async def host(ws) -> None:
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") == "start":
                latest[frame["member"]] = frame["token"]
                task = asyncio.create_task(hello_once(frame["member"], frame["token"]))
                hellos.add(task)
                task.add_done_callback(hellos.discard)

    lead = ServerClient(server.url, lead_token)
    deadline = time.monotonic() + timeout
    try:
        async with websockets.connect(server.ws_url + "/ws/host/", additional_headers=auth, open_timeout=30) as ws:
            listener = asyncio.create_task(host(ws))
            limit = asyncio.Semaphore(8)

            async def spawn(name: str) -> None:
                async with limit:
                    await asyncio.wait_for(lead.tool("spawn_teammate", {"name": name, "description": "bench", "prompt": ""}),
                                           max(1.0, deadline - time.monotonic()))

            await asyncio.gather(*(spawn(n) for n in names))
            # Every teammate's session has said hello with its latest token (a start the
            # recovery pass repeated meanwhile brought a new one: say hello with that).
            while any(welcomed.get(n) is None or welcomed[n] != latest.get(n) for n in names):
                if time.monotonic() > deadline:
                    missing = [n for n in names if welcomed.get(n) != latest.get(n)]
                    raise RuntimeError(f"{len(missing)} teammates never started: {missing[:5]}")
                await asyncio.sleep(0.2)
                if not hellos:
                    for n in names:
                        if n in latest and welcomed.get(n) != latest[n]:
                            await hello_once(n, latest[n])
            listener.cancel()
    finally:
        await lead.aclose()
    return {n: welcomed[n] for n in names}
