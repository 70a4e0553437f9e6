"""Which server processes are alive, and the websockets each one holds.

Several daphne processes share one database. A process that dies hard
(``kill -9``, a crash) says goodbye to no one: its members stay ``running`` or
``idle`` with a session channel nobody reads, and its host rows keep saying a
host is connected. Admission would keep pushing into the void (the messages
stay undelivered, never lost, but nobody resumes the member) and keep asking a
host that is gone.

So each process beats: a ``ServerProcess`` row with ``last_seen`` refreshed
every ``HEARTBEAT_INTERVAL`` seconds (mailbox/operations/sweeper.py runs the beat from the
process's event loop on a database thread of its own, so a busy process still
beats, and one whose event loop stalls for ``PROCESS_TIMEOUT`` is treated as
dead). A process that finds, at its next beat, that it was taken for dead
closes all its websockets (code 4012, "reconnect"): the reaper has
already ended their sessions and dropped their presence, so the database no
longer knows them; their clients reconnect and say hello again, which puts
everything back. Every agent session (after its hello)
and every host websocket is recorded with the id of the process holding it.
Recovery (``presence_reap`` in mailbox/operations/recovery.py, run before each sweep) treats a process whose
row is older than ``PROCESS_TIMEOUT`` as dead:

- each of its sessions is closed exactly as a clean disconnect would close it
  (the member becomes ``inactive`` unless a newer session already took over),
  and the member's undelivered messages are admitted again at once, which asks
  a live host to cold-resume it;
- each of its host rows is deleted, so admission no longer counts that host.

Its channels need no cleaning: on Redis pub/sub (config/settings.py) a dead
process's subscriptions end with its Redis connection. A live process taken
for dead stays subscribed until its next beat closes its websockets; until
then they hear nothing, because what is for a session goes to the member's
current session channel only (mailbox/plumbing/events.py).

"""
import logging
import os
import socket
import threading
import uuid

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from mailbox.plumbing import events
from mailbox.models import HostPresence, ServerProcess, SessionPresence
from mailbox.plumbing import runtime

log = logging.getLogger(__name__)

PROCESS_ID = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

_lock = threading.Lock()
_beat_lock = threading.Lock()
_registered = False


@runtime.on_reset
def _unregistered() -> None:
    """This process registers its heartbeat afresh (a new database has no row of it: not a sign it was reaped)."""
    global _registered
    _registered = False


# The websockets this process holds: channel -> member id / team id.
_sessions: dict[str, int] = {}
_hosts: dict[str, int] = {}
# The channels of the websockets open in this process right now, kept by the consumers
# whatever the database said: a socket whose detach could not be written (the database was
# out of reach when it closed) is no longer here while its presence row still is
# (recovery.presence_reconcile ends such rows).
_open: set[str] = set()


def timing(name: str) -> float:
    return settings.STEERBOARD[name]


# --- this process -------------------------------------------------------------------------
def process_beat() -> bool:
    """Refresh this process's row; answers True when it had to be (re)created."""
    # One beat at a time: the first websocket's registration (a database thread)
    # and the heartbeat (a thread of its own) both beat, and two first beats
    # interleaved made the second take the first's row for a resurrection and
    # close the process's brand-new websockets.
    with _beat_lock:
        return _beat()


def _beat() -> bool:
    global _registered
    now = timezone.now()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # A beat never waits on a lock: when another transaction holds our row
            # (a test's open transaction did), fail now and beat again next time.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
        if ServerProcess.objects.filter(pk=PROCESS_ID).update(last_seen=now):
            _registered = True
            return False
        ServerProcess.objects.update_or_create(
            pk=PROCESS_ID, defaults={"hostname": socket.gethostname()[:255], "pid": os.getpid(), "last_seen": now}
        )
    if _registered:
        log.warning("process %s was taken for dead; closing its websockets so their clients reconnect", PROCESS_ID)
        _websockets_reset()
    _registered = True
    return True


def _ensure_registered() -> None:
    if not _registered:
        process_beat()


RESET_EVENTS = {"session": {"type": "session.reset"}, "host": {"type": "host.reset"}}


def _websockets_reset() -> None:
    """Reaped while alive (stalled past PROCESS_TIMEOUT): the reaper ended our
    sessions and dropped our hosts, so a cold-resume may already be starting a
    second session. Ask each of our websockets to close; its client reconnects
    and says hello."""
    with _lock:
        sessions, hosts = list(_sessions), list(_hosts)
    for channel in sessions:
        events.channel_send_quietly(channel, RESET_EVENTS["session"])
    for channel in hosts:
        events.channel_send_quietly(channel, RESET_EVENTS["host"])


# --- websockets this process holds -----------------------------------------------------------
def socket_opened(channel: str) -> None:
    """A websocket (agent session or host) of this process was accepted: before any row of it is written."""
    with _lock:
        _open.add(channel)


def socket_closed(channel: str) -> None:
    """It closed: before its rows are ended (which may fail and be left to reconcile)."""
    with _lock:
        _open.discard(channel)


def open_channels() -> set[str]:
    with _lock:
        return set(_open)


def session_attached(*, member_id: int, channel: str) -> None:
    _attached("session", channel, member_id)


def session_detached(*, channel: str) -> None:
    _detached("session", channel)


def host_attached(*, team_id: int, channel: str) -> None:
    _attached("host", channel, team_id)


def host_detached(*, channel: str) -> None:
    _detached("host", channel)


# Each kind of websocket this process holds: its channels here (channel -> owner id), its
# presence rows, and the rows' owner column.
_HELD = {"session": (_sessions, SessionPresence, "member_id"), "host": (_hosts, HostPresence, "team_id")}


def _attached(kind: str, channel: str, owner_id: int) -> None:
    held, rows, owner = _HELD[kind]
    _ensure_registered()
    with _lock:
        held[channel] = owner_id
    rows.objects.update_or_create(channel=channel, defaults={owner: owner_id, "process_id": PROCESS_ID})


def _detached(kind: str, channel: str) -> None:
    held, rows, _ = _HELD[kind]
    with _lock:
        held.pop(channel, None)
    rows.objects.filter(channel=channel).delete()
