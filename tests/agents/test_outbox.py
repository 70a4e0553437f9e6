"""The SDK's outbox on its own (sdk/steerboard_agents/outbox.py): entries posted back to back are
all on the wire before any ack, in order, in one ``entries`` frame when posted together; ``settled()`` waits for every one of them, a refusal
included, and says nothing of a refusal nobody awaited."""
import asyncio

import pytest

from steerboard_agents.client import ToolError
from steerboard_agents.outbox import Outbox


class Wire:
    def __init__(self):
        self.frames: list[dict] = []

    async def send(self, frame: dict) -> bool:
        self.frames.append(frame)
        return True


async def test_posted_entries_go_out_together_and_settle_when_all_are_answered():
    wire, acked = Wire(), []
    outbox = Outbox(wire.send, on_acked=lambda entry, folded: acked.append(entry["id"]))
    waiters = [await outbox.post({"id": f"e{i}"}) for i in range(3)]
    await asyncio.sleep(0)  # the event loop runs something else: what was posted goes out
    assert wire.frames == [{"type": "entries", "entries": [{"id": "e0"}, {"id": "e1"}, {"id": "e2"}]}]
    assert len(outbox) == 3
    await outbox.post({"id": "e3"})
    await outbox.flush()  # one alone goes in an entry frame
    assert wire.frames[1:] == [{"type": "entry", "entry": {"id": "e3"}}]
    outbox.acked("e3", folded=False)

    settling = asyncio.ensure_future(outbox.settled())
    outbox.acked("e0", folded=False)
    outbox.acked("e1", folded=True)
    await asyncio.sleep(0)
    assert not settling.done(), "e2 is not answered yet"
    assert outbox.refused({"code": "VALIDATION_ERROR", "message": "no"})  # the oldest in flight: e2
    await asyncio.wait_for(settling, 1)
    assert acked == ["e3", "e0", "e1"] and len(outbox) == 0
    assert [w.result() for w in waiters[:2]] == [False, True]
    with pytest.raises(ToolError):
        waiters[2].result()


async def test_report_still_waits_for_its_own_ack():
    wire = Wire()
    outbox = Outbox(wire.send, on_acked=lambda entry, folded: None)
    reporting = asyncio.ensure_future(outbox.report({"id": "only"}))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not reporting.done() and wire.frames
    outbox.acked("only", folded=True)
    assert await asyncio.wait_for(reporting, 1) is True
    await asyncio.wait_for(outbox.settled(), 1)  # nothing left


async def test_entries_go_again_after_a_welcome_in_one_frame_each_twenty():
    """What was never acknowledged goes again on the next connection, in order, at most
    FRAME_ENTRIES to a frame; nothing is sent twice on it."""
    wire = Wire()
    outbox = Outbox(wire.send, on_acked=lambda entry, folded: None)
    for i in range(25):
        await outbox.post({"id": f"e{i}"})
    await outbox.flush()
    outbox.acked("e0", folded=False)
    outbox.connection_new()
    wire.frames.clear()
    await outbox.welcomed()
    assert [f["type"] for f in wire.frames] == ["entries", "entries"]
    assert [e["id"] for f in wire.frames for e in f["entries"]] == [f"e{i}" for i in range(1, 25)]
    assert len(wire.frames[0]["entries"]) == 20
    await asyncio.sleep(0)
    assert len(wire.frames) == 2  # the flush posted before the welcome found nothing left to send
