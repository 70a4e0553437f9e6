"""A session's steered messages between their ``steer`` frame and the step boundary
that lets them into the conversation.

Messages enter in ``seq`` order and never twice. A steer for a message already in
the conversation or already waiting is folded (the server's doorbells may
repeat). A gap in ``seq`` means a replay is coming, so the messages after it wait
for the replay. After a welcome that announces no replay, the next steer's
``seq`` says where this member's inbox stands now, so an earlier gap is no gap;
after a replay the server has sent every undelivered message, so the same holds.
"""
from __future__ import annotations

import asyncio


class Inbox:
    def __init__(self):
        self.waiting: dict[str, dict] = {}  # message id -> steered, not yet in the conversation
        self.integrated: dict[str, dict] = {}  # message id -> its user_message entry
        self.changed = asyncio.Event()
        self.replayed = asyncio.Event()  # the first welcome's replay has arrived
        self._last_seq = 0
        self._replay_left = 0
        self._baseline_pending = False

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def restored(self, entry: dict, message_id: str, seq: int) -> None:
        """A message the durable history already holds (cold-resume)."""
        self.integrated[message_id] = entry
        self._last_seq = max(self._last_seq, seq)

    def welcome(self, replay: int) -> None:
        self._replay_left = replay
        # Nothing undelivered: the next steer's seq is where this member's inbox stands now.
        self._baseline_pending = replay == 0
        if replay == 0:
            self.replayed.set()

    def steer(self, message: dict) -> dict | str | None:
        """Take a steered message. Returns None when it is new, "waiting" when it was
        already waiting, or the entry that already holds it (report it again)."""
        message_id = message["id"]
        if self._baseline_pending:
            self._baseline_pending = False
            self._last_seq = max(self._last_seq, int(message["seq"]) - 1)
        if message_id in self.integrated:
            found = self.integrated[message_id]
        elif message_id in self.waiting:
            found = "waiting"
        else:
            self.waiting[message_id] = message
            self.changed.set()
            found = None
        if self._replay_left > 0:
            self._replay_left -= 1
            if self._replay_left == 0:
                self._replay_done()
        return found

    def _replay_done(self) -> None:
        self.replayed.set()
        if self.waiting:
            lowest = min(int(m["seq"]) for m in self.waiting.values())
            self._last_seq = max(self._last_seq, lowest - 1)
            self.changed.set()

    def drainable(self) -> list[dict]:
        """Messages that may enter now: in seq order, stopping at a gap (a replay is coming)."""
        out, expected = [], self._last_seq + 1
        for message in sorted(self.waiting.values(), key=lambda m: int(m["seq"])):
            seq = int(message["seq"])
            if seq > expected:
                break
            out.append(message)
            expected = max(expected, seq + 1)
        return out

    def entered(self, message: dict, entry: dict) -> None:
        """The message is in the conversation now, as ``entry``."""
        self.waiting.pop(message["id"], None)
        self.integrated[message["id"]] = entry
        self._last_seq = max(self._last_seq, int(message["seq"]))
