"""The SDK's outbox on its own (sdk/steerboard_agents/outbox.py): entries posted back to back are
all on the wire before any ack, in order, in one ``entries`` frame when posted together (or in the
frame that takes them first: ``carry``); ``settled()`` waits for every one of them, a refusal
included, and says nothing of a refusal nobody awaited."""
import asyncio

import pytest

from steerboard_agents.client import ToolError
from steerboard_agents.outbox import Outbox


async def sent(wire: "Wire", frames: int) -> None:
    """Until the outbox has sent that many frames (it flushes FLUSH_DELAY after a post)."""
    async with asyncio.timeout(2):
        while len(wire.frames) < frames:
            await asyncio.sleep(0.001)


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
    await asyncio.sleep(0)
    assert wire.frames == [], "nothing goes before FLUSH_DELAY: a frame that needs them may carry them"
    await sent(wire, 1)  # then what was posted goes out
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
    await sent(wire, 1)
    assert not reporting.done()
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


async def test_a_frame_that_needs_the_unsent_entries_carries_them():
    """``carry()`` hands the entries not yet sent to the frame about to go (a tool frame's): in
    flight from then on, never sent again on this connection; none while one waits out a quota
    pause, or while more than a frame's worth wait; those a frame took and did not send go in
    the next flush."""
    wire = Wire()
    outbox = Outbox(wire.send, on_acked=lambda entry, folded: None)
    for i in range(2):
        await outbox.post({"id": f"e{i}"})
    assert [e["id"] for e in outbox.carry()] == ["e0", "e1"]
    assert outbox.carry() == [] and outbox.in_flight()
    settling = asyncio.ensure_future(outbox.settled())
    await asyncio.sleep(0.01)
    assert wire.frames == [] and not settling.done()  # carried: not flushed as well
    outbox.acked("e0", folded=False)
    outbox.acked("e1", folded=False)
    await asyncio.wait_for(settling, 1)

    await outbox.post({"id": "e2"})
    taken = outbox.carry()
    outbox.uncarried(taken)  # that frame did not go out
    await sent(wire, 1)
    assert wire.frames == [{"type": "entry", "entry": {"id": "e2"}}]

    outbox.quota_paused("e2", 60)
    await outbox.post({"id": "e3"})
    assert outbox.carry() is None, "e2 waits out a pause: e3 may not overtake it"
    outbox.connection_new()
    await outbox.welcomed()  # sent again now, in order
    assert outbox.carry() == []
    for i in range(4, 4 + 21):
        await outbox.post({"id": f"e{i}"})
    assert outbox.carry() is None, "more than a frame's worth: they go as entries frames"
