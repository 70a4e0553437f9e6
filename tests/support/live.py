"""A real daphne process on its own database, for end-to-end tests.

The process runs the project's ASGI application exactly as in production (its
settings are production's but for a fast password hasher: live_settings.py). On
the embedded default it gets a fresh SQLite file; when the test run is on
PostgreSQL (DATABASE_URL=postgres://...) it gets a fresh PostgreSQL database of
its own, and shares the run's Redis (REDIS_URL) under a channel prefix of its
own. ``LiveEnvironment(tmp_path, scale_out=True)`` asks for PostgreSQL + Redis
whatever the run is on (tests that need several processes); PostgreSQL and
Redis on 127.0.0.1 are always there in CI (scripts/test.sh starts them).
"""
import atexit
import contextlib
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from demo import daphne_process
from demo.daphne_process import port_claim
from tests.support import run_shared
from tests.support.environment import ManageCommands
from tests.support.services import PrivatePostgres, PrivateRedis, postgres_bin

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port for a server this test starts, that no other test process can be handed
    meanwhile (frontend/daphne_process.py)."""
    return port_claim()


def _server(url: str) -> str:
    """A PostgreSQL URL without its database name."""
    return url.rsplit("/", 1)[0]


def _postgres_database_new(base_url: str, template: str | None = None) -> str:
    import psycopg

    name = f"steerboard_e2e_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_server(base_url) + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        if _server(base_url) == _server(_postgres_or_default(_RUN_DATABASE_URL)):
            # On the run's server (the test processes' databases, the live environments', the
            # templates) a commit returns without waiting for its WAL to reach the disk: 4.9 ms a
            # commit became 0.4 ms (5 Dec, load 12), and the tests and their daphne processes
            # commit thousands of times. What a commit makes visible, and to whom, is unchanged;
            # only a crash of that server itself could lose the last commits, and no test crashes
            # it: a test that stops or kills PostgreSQL does it to a cluster of its own
            # (tests/support/services.py), whose commits reach the kernel before they return.
            conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    return _server(base_url) + "/" + name


# base DATABASE_URL ("" for SQLite) -> the migrated template this process copies: a SQLite file,
# or a PostgreSQL database name; the run's workers share one (tests/support/run_shared.py).
_templates: dict[str, str] = {}

# The run's DATABASE_URL, read at import: before any test points DATABASE_URL at a private cluster.
_RUN_DATABASE_URL = os.environ.get("DATABASE_URL", "")


def _migrate(env: dict, url: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"],
        cwd=ROOT, env={**env, "DATABASE_URL": url}, capture_output=True, text=True, timeout=180,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py migrate failed: {result.stderr[-2000:]}")


def _migrated_template(env: dict, base_url: str) -> str:
    if base_url in _templates:
        return _templates[base_url]
    run_postgres = _postgres_or_default(_RUN_DATABASE_URL)
    if base_url and _server(base_url) != _server(run_postgres):
        # Another server (a private cluster, tests/support/services.py): a copy of the run's
        # own template, not a `migrate` of its own (seconds of CPU per cluster). Neither kept
        # nor dropped: a cluster serves one test and goes with it, and a later one may get its port.
        url = _postgres_database_new(base_url)
        _postgres_tool("psql", "-q", "-X", "-v", "ON_ERROR_STOP=1", "-d", url,
                       input=_template_dump(env, run_postgres))
        return url.rsplit("/", 1)[1]
    if run_shared.RUN_ID:
        template = _run_template(env, base_url)
    elif base_url:
        url = _postgres_database_new(base_url)
        template = url.rsplit("/", 1)[1]
        atexit.register(_postgres_database_drop, url)
        _migrate(env, url)
    else:
        template = str(Path(tempfile.mkdtemp(prefix="steerboard-template-")) / "template.sqlite3")
        _migrate(env, f"sqlite:///{template}")
    _templates[base_url] = template
    return template


def _run_template(env: dict, base_url: str) -> str:
    """The run's template on ``base_url``'s server (or the SQLite one), migrated by the first
    worker that asks, under the run's lock, and published under its name only once whole:
    nothing connects to it after, so the workers' ``CREATE DATABASE ... TEMPLATE`` never
    find it in use."""
    with run_shared.lock(f"template {_server(base_url) if base_url else 'sqlite'}"):
        if not base_url:
            template = run_shared.folder() / "template.sqlite3"
            if not template.exists():
                building = run_shared.folder() / "template-building.sqlite3"
                building.unlink(missing_ok=True)
                _migrate(env, f"sqlite:///{building}")
                building.replace(template)
            return str(template)
        import psycopg

        name = run_shared.postgres_template_name()
        with psycopg.connect(_server(base_url) + "/postgres", autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return name
            building = _postgres_database_new(base_url)
            run_shared.postgres_drop_at_end(building)
            _migrate(env, building)
            conn.execute(f'ALTER DATABASE "{building.rsplit("/", 1)[1]}" RENAME TO "{name}"')
            run_shared.postgres_drop_at_end(_server(base_url) + "/" + name)
        return name


_dumps: dict[str, bytes] = {}


def _template_dump(env: dict, run_postgres: str) -> bytes:
    """The run's template as SQL (pg_dump), for a private cluster: dumped once per process, from a
    copy of its own (a connection to the template itself would stop the others' copies)."""
    if run_postgres not in _dumps:
        copy = _postgres_database_new(run_postgres, template=_migrated_template(env, run_postgres))
        try:
            _dumps[run_postgres] = _postgres_tool("pg_dump", "--no-owner", "--no-privileges", "-d", copy)
        finally:
            _postgres_database_done(copy)
    return _dumps[run_postgres]


def _postgres_tool(tool: str, *args: str, input: bytes | None = None) -> bytes:
    """One of PostgreSQL's client programs (tests/support/services.py finds them): its stdout."""
    result = subprocess.run([str(postgres_bin() / tool), *args], input=input, capture_output=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{tool} failed: {result.stderr.decode(errors='replace')[-2000:]}")
    return result.stdout


def _sqlite_copy(source: str, target: Path) -> None:
    """SQLite's online backup: the whole database, whatever its WAL still holds."""
    import sqlite3

    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _postgres_database_done(url: str) -> None:
    """A database no test uses any more. On the run's server it is dropped when the run ends
    (``run_shared.postgres_drop_at_end`` says why: a drop checkpoints the whole cluster), or when
    this process does without pytest-xdist; on a private cluster (fsync off, gone with its test), now."""
    if _server(url) != _server(_postgres_or_default(_RUN_DATABASE_URL)):
        _postgres_database_drop(url)
    elif run_shared.RUN_ID:
        run_shared.postgres_drop_at_end(url)
    else:
        atexit.register(_postgres_database_drop, url)


def _postgres_database_drop(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    try:
        with psycopg.connect(_server(url) + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception:
        pass


def process_database() -> tuple[str, Callable[[], None]]:
    """The test process's own database (tests/conftest.py ``django_db_setup``): a copy of the
    run's migrated template, as a live environment's is. Returns Django's ``NAME`` for it (a
    PostgreSQL database's name or a SQLite file's path) and what removes it when the process is
    done with it (on the run's PostgreSQL, the controller drops it at the end of the run)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.live_settings"}
    if _RUN_DATABASE_URL.startswith("postgres"):
        url = _postgres_database_new(_RUN_DATABASE_URL, template=_migrated_template(env, _RUN_DATABASE_URL))
        return url.rsplit("/", 1)[1], lambda: _postgres_database_done(url)
    folder = Path(tempfile.mkdtemp(prefix="steerboard-test-"))
    _sqlite_copy(_migrated_template(env, ""), folder / "test.sqlite3")
    return str(folder / "test.sqlite3"), lambda: shutil.rmtree(folder, ignore_errors=True)


PG_URL_DEFAULT = "postgres://postgres@127.0.0.1:5432/steerboard"
REDIS_URL_DEFAULT = "redis://127.0.0.1:6379/0"


def postgres_run_only(why: str):
    """Skip outside the PostgreSQL run of scripts/test.sh, saying so: for tests that stop
    a PostgreSQL cluster of their own, or that run on PostgreSQL + Redis whatever the run
    is on (they would only repeat themselves in the embedded run). CI runs both runs."""
    return pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason=f"{why}: runs once, in the PostgreSQL run of scripts/test.sh",
    )


def embedded_run_only(why: str):
    """Skip in the PostgreSQL run of scripts/test.sh, saying so: for tests that run their
    processes on the embedded default whatever the run is on (they would only repeat
    themselves there). CI runs both runs."""
    return pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason=f"{why}: runs once, in the embedded run of scripts/test.sh",
    )


def _postgres_or_default(database_url: str) -> str:
    """``database_url`` if it is PostgreSQL's, else the PostgreSQL scripts/test.sh starts."""
    return database_url if database_url.startswith("postgres") else os.environ.get("STEERBOARD_PG_URL", PG_URL_DEFAULT)


def scale_out_urls() -> tuple[str, str]:
    """The PostgreSQL and Redis this run may use for scale-out, whatever it runs on."""
    return (_postgres_or_default(os.environ.get("DATABASE_URL", "")),
            os.environ.get("REDIS_URL") or os.environ.get("STEERBOARD_REDIS_URL", REDIS_URL_DEFAULT))


class LiveEnvironment(ManageCommands):
    """One database (and channel-layer namespace) that several daphne processes may share.

    ``scale_out``: None follows the test run (SQLite + in-memory, or the run's
    PostgreSQL + Redis); True always uses PostgreSQL + Redis."""

    def __init__(self, tmp_path: Path, scale_out: bool | None = None, **settings_env: str):
        self.tmp_path = tmp_path
        self.env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
        # Production settings refuse to start without SECRET_KEY; all processes of one environment share one.
        self.env.setdefault("SECRET_KEY", "live-" + secrets.token_urlsafe(40))
        self.env.update(
            {
                # config.settings with a fast password hasher (tests/support/live_settings.py)
                "DJANGO_SETTINGS_MODULE": "tests.support.live_settings",
                "PYTHONUNBUFFERED": "1",
                "STEERBOARD_VAR_DIR": str(tmp_path / "var"),
                "STEERBOARD_SWEEP_INTERVAL": "0.5",
                "STEERBOARD_REDELIVER_AFTER": "2",
                "STEERBOARD_HEARTBEAT_INTERVAL": "0.5",
                "STEERBOARD_PROCESS_TIMEOUT": "5",
            }
        )
        base_db = os.environ.get("DATABASE_URL", "")
        redis_url = os.environ.get("REDIS_URL", "")
        if scale_out:
            base_db, redis_url = scale_out_urls()
            self.env["REDIS_URL"] = redis_url
        self.postgres = base_db.startswith("postgres")
        self.scale_out = self.postgres and bool(redis_url)
        if redis_url:
            # A prefix of our own keeps parallel environments apart on one Redis.
            self.env["STEERBOARD_CHANNEL_PREFIX"] = f"e2e{uuid.uuid4().hex[:8]}:"
        self.env.update(settings_env)
        self._worker: _ManageWorker | None = None
        # A copy of a database this test process migrated once (`migrate` costs seconds of CPU).
        if self.postgres:
            self.env["DATABASE_URL"] = _postgres_database_new(base_db, template=_migrated_template(self.env, base_db))
        else:
            self.env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'live.sqlite3'}"
            _sqlite_copy(_migrated_template(self.env, ""), tmp_path / "live.sqlite3")

    def manage(self, *args: str, check: bool = True) -> str:
        """``manage.py ARGS`` on this environment: its stdout; a failure raises with its stderr.

        The command runs in this environment's manage worker (tests/support/manage_worker.py),
        a process that started Django once, with the environment as it is now."""
        if self._worker is None or self._worker.env != self.env:
            self._worker_stop()
            self._worker = _ManageWorker(dict(self.env), self.tmp_path / "manage-worker.log")
        answer = self._worker.run(list(args), timeout=120)
        if check and answer["code"] != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed: {answer['stderr'][-2000:]}")
        return answer["stdout"]

    def _worker_stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def query(self, sql: str) -> list[tuple]:
        """Read the environment's database directly (checkers; no Django in this process)."""
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
        self._worker_stop()
        if self.postgres:
            _postgres_database_done(self.env["DATABASE_URL"])


class _ManageWorker:
    """One ``python -m tests.support.manage_worker`` process: a command a line in, an answer a line out."""

    def __init__(self, env: dict, log_path: Path):
        self.env = env
        self.log_path = log_path  # the worker's own stderr: Django's start-up and logging
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.manage_worker"],
                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )

    def run(self, args: list[str], timeout: float) -> dict:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it ended (Django did not start): the log below says why
            line = ""
        else:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(
                f"manage.py {' '.join(args)}: no answer from the manage worker in {timeout}s "
                f"(exit {self.proc.returncode}): {self.log_path.read_text(errors='replace')[-2000:]}"
            )
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream:
                stream.close()


class DaphneProcess(daphne_process.DaphneProcess):
    """The project's daphne (frontend/daphne_process.py) on a live environment: its settings,
    a claimed port, its log beside the environment's database."""

    def __init__(self, environment: LiveEnvironment, port: int | None = None, **extra_env: str):
        self.environment = environment
        self.extra_env = extra_env
        port = port or free_port()
        super().__init__(port=port, env={}, log_path=environment.tmp_path / f"daphne-{port}.log")

    def spawn(self):
        self.env = {**self.environment.env, **self.extra_env}  # the environment as it is now
        return super().spawn()


def start_together(*servers: DaphneProcess, timeout: float = 30) -> tuple[DaphneProcess, ...]:
    """Several daphne processes started side by side: each spends a second or two importing
    Django and the project before it answers, and they do it at the same time. Returns once
    every one answers; if one fails, all are stopped."""
    try:
        for server in servers:
            server.spawn()
        for server in servers:
            server.wait_ready(timeout)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


@contextlib.contextmanager
def own_database(tmp_path: Path, monkeypatch, **settings_env: str):
    """A PostgreSQL cluster and a redis-server of the test's own (tests/support/services.py),
    for a test that stops the database for real, a live environment on them (with
    ``settings_env``) and one daphne: ``(environment, server, pg)``, all ended after."""
    with contextlib.ExitStack() as stack:
        pg = PrivatePostgres().start()
        stack.callback(pg.close)
        redis = PrivateRedis().start()
        stack.callback(redis.close)
        monkeypatch.setenv("DATABASE_URL", pg.url)
        monkeypatch.setenv("REDIS_URL", redis.url)
        environment = LiveEnvironment(tmp_path, scale_out=True, **settings_env)
        stack.callback(environment.close)
        server = DaphneProcess(environment).start()
        stack.callback(server.stop)
        yield environment, server, pg
