"""One daphne process serving ``config.asgi:application``: the one way the project starts
one, for ``manage.py demo`` (demo/management/commands/demo.py), the tests' live
environments (tests/support/live.py) and the benchmarks (bench/harness.py). It lives
beside the demo, which nothing of the server imports, not in ``config`` (which imports
the apps: no package circle).

Django-free (the standard library and httpx): its callers need no settings, and the
process it starts reads its own from the environment it is handed. The process leads a
session of its own, so ``stop()`` and ``kill()`` reach whatever it started.

``port_claim()`` gives a port that no other process using it on this machine can be
handed until this process ends: binding port 0, reading the port and closing the socket
leaves a gap in which the kernel may hand the same port to anything else (another test
worker's port 0, any outgoing connection). A claimed port lies below the kernel's
ephemeral range (which it never hands out by itself) and is held under an exclusive lock
on a file named after it, in a directory shared by every process on the machine.
"""
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
APPLICATION = "config.asgi:application"
# Daphne's own timeouts as docs/deployment.md ("Slow and huge clients") sets them.
DEPLOYMENT_TIMEOUTS = ("--http-timeout", "3700", "--ping-interval", "20", "--ping-timeout", "30")


class Loopback:
    """The addresses of a server listening on 127.0.0.1:``port`` (this daphne, or the tests'
    in-process server, tests/support/inproc.py ``Served``)."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


class DaphneFailed(RuntimeError):
    """The process ended before it answered, or did not answer in time: ``reason`` says which,
    the message adds the log's tail."""

    def __init__(self, reason: str, log_tail: str):
        super().__init__(f"{reason}: {log_tail}")
        self.reason = reason


class DaphneProcess(Loopback):
    """``python -m daphne -b BIND -p PORT [ARGS] config.asgi:application`` in the project's
    folder, with ``env``, its output appended to ``log_path``; ready once ``ready_path``
    answers 200 on 127.0.0.1."""

    def __init__(self, *, port: int, env: dict, log_path: Path, bind: str = "127.0.0.1", args=(),
                 ready_path: str = "/api/v1/tools"):
        self.port, self.env, self.log_path, self.bind = port, env, Path(log_path), bind
        self.args, self.ready_path = tuple(args), ready_path
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "daphne", "-b", self.bind, "-p", str(self.port), *self.args, APPLICATION]

    def spawn(self) -> subprocess.Popen:
        """Start it; ``wait_ready`` waits until it answers."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self.proc

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaphneFailed(f"daphne exited with {self.proc.returncode} before it answered", self.log()[-3000:])
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise DaphneFailed(f"daphne did not answer on {self.url} within {timeout:g}s", self.log()[-3000:])

    def start(self, timeout: float = 30) -> "DaphneProcess":
        self.spawn()
        try:
            self.wait_ready(timeout)
        except DaphneFailed:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """kill -9: no goodbye to anyone."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, and SIGKILL if it has not ended within ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


_PORTS_DIR = Path(tempfile.gettempdir()) / "steerboard-ports"
_LOWEST_PORT = 20000
_claimed: dict[int, int] = {}  # port -> its open, locked file (kept until the process ends)


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_claim() -> int:
    """A port free now that no other process claiming ports here can be handed until this
    one ends (this process may start a server on it again: a restart)."""
    _PORTS_DIR.mkdir(mode=0o777, exist_ok=True)
    low, high = _LOWEST_PORT, max(_LOWEST_PORT + 1000, _ephemeral_start())
    first = random.randrange(low, high)
    for step in range(high - low):
        port = low + (first - low + step) % (high - low)
        if port in _claimed:
            continue
        fd = os.open(_PORTS_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if not _bindable(port):  # held by something that does not claim its ports
            os.close(fd)
            continue
        _claimed[port] = fd
        return port
    raise RuntimeError(f"no port left to claim in {low}-{high}")
