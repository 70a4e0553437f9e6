"""mailbox/operations/sweeper.py: the recovery pass each process runs in the background.

Several processes may sweep at once: admission claims targets with SKIP LOCKED
(PostgreSQL), so a sweeper never waits for a target another transaction holds.
These run on whatever the test run is on (SQLite + in-memory, PostgreSQL + Redis);
where the two databases serialise by different means, each test asserts the
guarantee, not the mechanism.
"""
import threading

import pytest
from django.db import connection, transaction

from mailbox.engine import delivery, hot_path
from mailbox.models import LeadLogRecord, MessageState
from teams.models import Member, SessionState
from teams.services import member_session_set, member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


def _team(name="sweeper", teammates=("worker",)):
    team, lead, _, _ = team_create(name=name)
    members = [member_spawn(lead=lead, name=n, description="d", prompt="p") for n in teammates]
    return team, lead, members


def test_a_worker_holding_a_target_is_not_waited_for_by_the_sweeper():
    """PostgreSQL: SKIP LOCKED hands the sweeper nothing for a target another
    transaction holds. SQLite has one writer at a time: the sweeper's admission
    runs after the holder commits. Either way the target is admitted once."""
    team, lead, (worker,) = _team()
    member_session_set(member_id=worker.pk, state=SessionState.IDLE, channel="test-channel-worker")
    message = hot_path.message_store(sender=lead, target_name="worker", content="hello")
    holding, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                Member.objects.select_for_update().get(pk=worker.pk)
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(30)
    if connection.vendor == "postgresql":
        assert delivery.target_admit(target_id=worker.pk, skip_locked=True) is None
        message.refresh_from_db()
        assert message.state == MessageState.QUEUED
        release.set()
    else:
        threading.Timer(0.5, release.set).start()
    t.join(30)
    result = delivery.target_admit(target_id=worker.pk, skip_locked=True)
    assert result is not None and result.admitted == [message.id]
    assert LeadLogRecord.objects.filter(kind="team/message/accepted", message=message).count() == 1


# --- heap_settle: long-lived objects out of the collector's full walks ---------------------------
class _Node:
    """An object in a reference cycle: only the collector can free it."""

    def __init__(self):
        self.me = self


@pytest.fixture
def heap(monkeypatch):
    """A settle baseline of this test's own, and the test process's heap unfrozen afterwards."""
    import gc

    from mailbox.operations import sweeper

    monkeypatch.setattr(sweeper, "_heap_baseline", 0)
    monkeypatch.setattr(sweeper, "_heap_frozen", 0)
    yield sweeper
    gc.unfreeze()


def test_a_settled_object_is_left_out_of_later_collections(heap):
    import gc

    held = _Node()
    heap.heap_settle()
    assert gc.get_freeze_count() > 0
    assert not any(o is held for o in gc.get_objects())  # no generation holds it: no collection walks it
    young = _Node()
    assert any(o is young for o in gc.get_objects())  # what came after the settle is collected as usual


def test_garbage_among_settled_objects_waits_for_the_full_pass_once_the_heap_doubled(heap):
    import gc
    import weakref

    node = _Node()
    gone = weakref.ref(node)
    assert heap.heap_settle() is False  # the first settle freezes what lives and sets the baseline
    del node
    gc.collect()
    assert gone() is not None  # a frozen cycle is no collection's business...
    assert heap.heap_settle() is False
    assert gone() is not None  # ...nor a settle's while the heap has not doubled
    grown = [_Node() for _ in range(heap._heap_baseline + 1000)]  # the heap doubles
    assert heap.heap_settle() is True
    assert gone() is None  # the full pass found it
    assert not any(o is grown[0] for o in gc.get_objects())  # and froze what lives again
    del grown
