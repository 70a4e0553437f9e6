"""Ports for the servers a test starts (daphne, the demo, a private PostgreSQL or Redis) that
nothing else can be handed while this test process may use them.

Binding port 0, reading the port and closing the socket (what ``free_port()`` did) leaves a
gap: until the server binds it, the kernel may hand the same port to anything else (another
pytest-xdist worker's port 0, any process's outgoing connection), and the server then fails
to start, or another's client reaches it. A port here is taken from below the kernel's
ephemeral range (which it never hands out by itself) and claimed with an exclusive lock on a
file named after it, in a directory every test process on this machine shares; the lock is
held until this process ends, so no other test process, of this run or another, claims the
port meanwhile. The same process may start a server on it again (a restart)."""
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

_DIR = Path(tempfile.gettempdir()) / "steerboard-ports"
_LOWEST = 20000
_held: dict[int, int] = {}  # port -> the open, locked file descriptor (kept until the process ends)


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne and the demo bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_claim() -> int:
    """A port no other test process can claim, free now, below the ephemeral range."""
    _DIR.mkdir(mode=0o777, exist_ok=True)
    low, high = _LOWEST, max(_LOWEST + 1000, _ephemeral_start())
    first = random.randrange(low, high)
    for step in range(high - low):
        port = low + (first - low + step) % (high - low)
        if port in _held:
            continue
        fd = os.open(_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if not _bindable(port):  # something outside the test runs holds it
            os.close(fd)
            continue
        _held[port] = fd
        return port
    raise RuntimeError(f"no port left to claim in {low}-{high}")
