"""A private PostgreSQL cluster and a private Redis server, for tests that stop,
kill and restart them (tests/e2e/test_infra_faults.py).

Each gets a port and a directory of its own under a fresh temporary directory,
so nothing else on the machine (the run's PostgreSQL on 5432, its Redis on
6379, another engineer's tests) is touched. PostgreSQL comes from Debian's
``/usr/lib/postgresql/<version>/bin``; initdb refuses to run as root, so as
root the cluster runs as the ``postgres`` user. Redis is ``redis-server``.
Nothing is skipped when a tool is missing: the test fails and says what is.
"""
import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from demo.daphne_process import port_claim
from tests.support import run_shared


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        on_path = shutil.which("initdb")
        if on_path is None:
            raise RuntimeError("no initdb: install Debian's postgresql (scripts/test.sh does)")
        return Path(on_path).parent
    return Path(found[-1]).parent


# PostgreSQL's bin directory -> a data directory initdb made, never started: each cluster is a copy.
_initdb_templates: dict[Path, Path] = {}


class PrivatePostgres:
    """``initdb`` + ``pg_ctl`` on a port and data directory of its own."""

    def __init__(self):
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="steerboard-pg-"))
        self.data = self.root / "data"
        self.logfile = self.root / "postgres.log"
        self.port = port_claim()
        self.as_user = None
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to postgres
            self.as_user = pwd.getpwnam("postgres")
            os.chown(self.root, self.as_user.pw_uid, self.as_user.pw_gid)
        # A copy of a cluster this test process initdb'ed once (initdb costs seconds of CPU);
        # `cp -a` keeps the owner and the 0700 mode PostgreSQL insists on.
        subprocess.run(["cp", "-a", str(self._initdb_once()), str(self.data)], check=True, timeout=120)

    def _initdb_once(self) -> Path:
        """The data directory initdb made once per run (tests/support/run_shared.py: the first
        worker that needs it, under the run's lock; the controller removes it), or once per
        process without pytest-xdist."""
        if self.bin not in _initdb_templates:
            if run_shared.RUN_ID:
                with run_shared.lock(f"initdb {self.bin}"):
                    root = run_shared.folder() / f"initdb-{self.bin.parent.name}"
                    if not (root / "data").exists():
                        shutil.rmtree(root, ignore_errors=True)
                        self._initdb(root, "building")
                        (root / "building").rename(root / "data")
            else:
                root = Path(tempfile.mkdtemp(prefix="steerboard-pg-template-"))
                atexit.register(shutil.rmtree, root, ignore_errors=True)
                self._initdb(root, "data")
            _initdb_templates[self.bin] = root / "data"
        return _initdb_templates[self.bin]

    def _initdb(self, root: Path, name: str) -> None:
        root.mkdir(exist_ok=True)
        if self.as_user is not None:
            os.chown(root, self.as_user.pw_uid, self.as_user.pw_gid)
        self._run("initdb", "-D", str(root / name), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/steerboard"

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [str(self.bin / tool), *args]
        if self.as_user is not None:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if check and result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout[-2000:]} {result.stderr[-2000:]}")
        return result

    def start(self) -> "PrivatePostgres":
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """A clean stop (``fast``: every client is disconnected) or ``immediate``."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every server process quits at once, without a
        shutdown checkpoint, and the next start runs crash recovery (a kill -9 of
        the postmaster leaves a pid file that a zombie keeps looking alive)."""
        self.stop("immediate")

    def create_database(self, name: str = "steerboard") -> None:
        import psycopg

        with psycopg.connect(f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """``redis-server`` on a port and directory of its own; kill -9 and start again on the same port."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("no redis-server: install Debian's redis-server (scripts/test.sh does)")
        self.root = Path(tempfile.mkdtemp(prefix="steerboard-redis-"))
        self.port = port_claim()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "PrivateRedis":
        log = open(self.root / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not _port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(self.root / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
