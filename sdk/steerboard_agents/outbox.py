"""A session's history entries on their way to the server, until each is acknowledged.

Every entry the session adds is reported at once, and the server acknowledges
each (``ack``, or ``acks`` for several). Entries go out back to back, without waiting
for the ack of the one before; those added before the session next waits for
anything go in one frame (``entries``; one alone in an ``entry`` frame), so a turn's
entries cost the server one frame and one answer where they can; where the server takes
it (its welcome's ``features``), the tool frame that comes next carries them instead,
and so does the status at a turn's end (``carry``). ``settled()`` waits
until every entry reported so far is acknowledged, and the turn runner calls it before anything leaves the
session (a tool call, the end of a turn), so what the conversation holds is
durable before it has any effect; a turn's entries share the server's commits
instead of waiting a round trip each. The server answers entries in the order it got them, so a
refusal (an ``error`` frame) is for the oldest entry still in flight. What is
never acknowledged is sent again after the next ``welcome``; an entry the
history quota refused goes again after the pause the server names. Entry ids
make every resend harmless (the server folds them).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from steerboard_agents.client import ToolError

log = logging.getLogger(__name__)

# Entries in one ``entries`` frame at most: well below the server's default cap on entries
# unacknowledged on one socket (STEERBOARD_MAX_ENTRIES_PER_REQUEST, 100).
FRAME_ENTRIES = 20
# How long a posted entry may wait for a frame that needs it (a tool call carries the entries
# before it, a status the turn's last ones) before it goes in an ``entries`` frame of its own:
# a model that answers at once sends its tool call with the entries that led to it, one frame
# instead of two; a model that takes longer waits this much more to show them.
FLUSH_DELAY = 0.002


class Outbox:
    def __init__(self, send: Callable[[dict], Awaitable[bool]], *, on_acked: Callable[[dict | None, bool], None]):
        """``send(frame)`` sends on the current connection (False without one);
        ``on_acked(entry, folded)`` is told of each acknowledgement."""
        self._send = send
        self._on_acked = on_acked
        self._unacked: OrderedDict[str, dict] = OrderedDict()
        self._waiters: dict[str, asyncio.Future] = {}
        self._inflight: deque[str] = deque()  # sent on this connection, not yet answered, in order
        self._unsent: list[dict] = []  # posted, to go in the next frame
        self._flushing: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._paused: set[str] = set()  # refused by the history quota, to go again after a pause

    def holds(self, entry_id: str | None) -> bool:
        return entry_id in self._unacked

    def __len__(self) -> int:
        """Entries reported and not yet acknowledged by the server."""
        return len(self._unacked)

    async def report(self, entry: dict) -> bool:
        """Send the entry and wait for its ack: True when it folded on one the server held,
        False when it was refused (or folded as False). Without a connection it waits for
        the next welcome's resend."""
        waiter = await self.post(entry)
        try:
            return await waiter
        except ToolError:
            return False

    async def post(self, entry: dict) -> asyncio.Future:
        """Send the entry without waiting for its ack: the future answers as ``report`` would
        (a refusal as ``ToolError``). Entries posted one after another keep their order; those
        posted within FLUSH_DELAY of the first go out in one frame, or with the frame that
        needs them first (``carry``)."""
        waiter = self._waiters.get(entry["id"])
        if waiter is None or waiter.done():
            waiter = asyncio.get_running_loop().create_future()
            # A refusal nobody awaits is still answered (settled() reads it): no warning.
            waiter.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._waiters[entry["id"]] = waiter
        self._unacked[entry["id"]] = entry
        self._unsent.append(entry)
        if len(self._unsent) == 1:
            asyncio.get_running_loop().call_later(FLUSH_DELAY, self._flush_soon)
        return waiter

    def _flush_soon(self) -> None:
        if self._unsent:  # held here: the loop keeps only a weak reference to a task
            self._flushing = asyncio.get_running_loop().create_task(self.flush())

    def carry(self) -> list[dict] | None:
        """The entries posted and not yet sent, taken for the frame about to be sent (a tool
        frame's or an entries frame's with a status: in flight on it from now on, in order
        after everything sent before), at most FRAME_ENTRIES; [] when there are none. None
        when they cannot go that way: a flush or a resend is under way, there are more, or one
        waits out a quota pause (then ``settled()`` first)."""
        if self._paused or self._lock.locked() or len(self._unsent) > FRAME_ENTRIES:
            return None
        unsent, self._unsent = self._unsent, []
        self._inflight.extend(entry["id"] for entry in unsent)
        return unsent

    def uncarried(self, entries: list[dict]) -> None:
        """The frame that took them did not go out: they go in the next flush (or, the
        connection gone, after the next welcome)."""
        for entry in entries:
            with contextlib.suppress(ValueError):
                self._inflight.remove(entry["id"])
        self._unsent[:0] = [entry for entry in entries if entry["id"] in self._unacked]
        if self._unsent:
            asyncio.get_running_loop().call_soon(self._flush_soon)

    def in_flight(self) -> bool:
        """Whether an entry sent on this connection is still unanswered."""
        return bool(self._inflight)

    async def flush(self) -> None:
        """Send what was posted and not yet sent (before any other frame of the session)."""
        async with self._lock:
            unsent, self._unsent = self._unsent, []
            await self._send_all(unsent)

    async def settled(self) -> None:
        """Wait until every entry posted so far is acknowledged (or refused)."""
        await self.flush()
        while True:
            pending = [waiter for waiter in self._waiters.values() if not waiter.done()]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    async def _send_all(self, entries: list[dict]) -> None:
        for start in range(0, len(entries), FRAME_ENTRIES):
            chunk = entries[start:start + FRAME_ENTRIES]
            ids = [entry["id"] for entry in chunk]
            self._inflight.extend(ids)
            frame = {"type": "entry", "entry": chunk[0]} if len(chunk) == 1 else {"type": "entries", "entries": chunk}
            if not await self._send(frame):
                for entry_id in ids:
                    with contextlib.suppress(ValueError):
                        self._inflight.remove(entry_id)

    # --- the connection ----------------------------------------------------------------------
    def connection_new(self) -> None:
        self._inflight.clear()

    async def welcomed(self) -> None:
        """A new connection is ready: send again everything not acknowledged, in order."""
        async with self._lock:
            self._unsent = []
            self._paused.clear()  # sent again now, paused or not
            await self._send_all(list(self._unacked.values()))

    # --- the server's answers ------------------------------------------------------------------
    def acked(self, entry_id: str | None, *, folded: bool) -> None:
        with contextlib.suppress(ValueError):
            self._inflight.remove(entry_id)
        entry = self._unacked.pop(entry_id, None)
        self._on_acked(entry, folded)
        waiter = self._waiters.pop(entry_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(folded)

    def quota_paused(self, entry_id: str, pause: float) -> None:
        """The history quota refused the entry (nothing stored): send it again after ``pause``;
        its reporter waits meanwhile."""
        with contextlib.suppress(ValueError):
            self._inflight.remove(entry_id)
        self._paused.add(entry_id)
        log.warning("history quota: entry %s goes again in %.1f s", entry_id, pause)
        asyncio.get_running_loop().call_later(pause, lambda: asyncio.ensure_future(self._resend(entry_id)))

    async def _resend(self, entry_id: str) -> None:
        self._paused.discard(entry_id)
        entry = self._unacked.get(entry_id)
        if entry is None or entry_id in self._inflight:
            return  # acknowledged meanwhile, or a welcome already sent it again
        async with self._lock:
            await self._send_all([entry])

    def refused(self, error: dict) -> bool:
        """An ``error`` frame for an entry: the oldest in flight. False when none is."""
        if not self._inflight:
            return False
        entry_id = self._inflight.popleft()
        entry = self._unacked.pop(entry_id, None)
        waiter = self._waiters.pop(entry_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(ToolError(**{k: error.get(k, "") for k in ("code", "message")}))
        elif entry is not None:
            log.warning("entry %s was refused", entry_id)
        return True
