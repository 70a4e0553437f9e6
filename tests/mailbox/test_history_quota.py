"""Issue 12, item 9: a member's session history has a quota (mailbox/plumbing/quota.py).

One entry's JSON at most MAX_ENTRY_BYTES, at most MAX_ENTRIES_PER_REQUEST entries
in one POST (or unacknowledged on one websocket), at most HISTORY_BYTES_PER_MINUTE
bytes a minute per member; every refusal is a 4xx (or an ``error`` frame) with a
code, stores nothing of the refused entry and keeps what came before it."""
import threading

import pytest
from channels.db import database_sync_to_async
from django.db import connection, transaction

from mailbox.models import HistoryEntry
from mailbox.plumbing import quota
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def entry(entry_id: str, size: int = 10) -> dict:
    return {"id": entry_id, "kind": "assistant_text", "text": "x" * size}


@database_sync_to_async
def history_ids(member: str) -> list[str]:
    return list(HistoryEntry.objects.filter(member__name=member).order_by("id").values_list("entry_id", flat=True))


async def _member(api):
    team = await team_new()
    return team, await spawn(api, team["lead"], "alpha", "implementer")


async def test_rest_an_entry_over_the_size_limit_is_413_and_the_ones_before_it_stay(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_ENTRY_BYTES": 2000}
    _, impl = await _member(api)
    response = await api.http.post(
        "/api/v1/session/entries",
        json={"entries": [entry("e1"), entry("e2", 5000), entry("e3")]},
        headers=bearer(impl),
    )
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error"]["code"] == "HISTORY_ENTRY_TOO_LARGE"
    assert body["limit"] == 2000 and body["entry_id"] == "e2"
    assert body["acks"] == [{"entry_id": "e1", "folded": False}]
    assert await history_ids("implementer") == ["e1"]


async def test_rest_more_entries_than_the_limit_in_one_request_is_413_and_nothing_is_stored(api):
    _, impl = await _member(api)
    limit = quota.entries_per_request()
    assert limit == 100  # the documented default
    response = await api.http.post(
        "/api/v1/session/entries",
        json={"entries": [entry(f"e{i}") for i in range(limit + 1)]},
        headers=bearer(impl),
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "TOO_MANY_ENTRIES" and response.json()["limit"] == limit
    assert await history_ids("implementer") == []


async def test_rest_bytes_per_minute_refuses_with_429_retry_after_per_member(api, settings, clock):
    settings.STEERBOARD = {**settings.STEERBOARD, "HISTORY_BYTES_PER_MINUTE": 2000}
    team, impl = await _member(api)
    response = await api.http.post(
        "/api/v1/session/entries",
        json={"entries": [entry(f"e{i}", 500) for i in range(6)]},
        headers=bearer(impl),
    )
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["error"]["code"] == "HISTORY_QUOTA_EXCEEDED"
    assert body["limit"] == {"bytes_per_minute": 2000}
    assert 0 < body["retry_after"] <= 60
    assert int(response.headers["Retry-After"]) >= 1
    stored = [a["entry_id"] for a in body["acks"]]
    assert stored == ["e0", "e1", "e2"] and body["entry_id"] == "e3"  # ~540 bytes each: three fit in 2000
    assert await history_ids("implementer") == stored
    # The quota is the member's: another member of the team writes on.
    other = await api.http.post("/api/v1/session/entries", json={"entry": entry("l1", 500)}, headers=bearer(team["lead"]))
    assert other.status_code == 200, other.text
    # And it refills: a sixtieth of it a second, so not yet just before retry_after ...
    clock.shift(body["retry_after"] - 0.1)
    early = await api.http.post("/api/v1/session/entries", json={"entry": entry("e3", 500)}, headers=bearer(impl))
    assert early.status_code == 429, early.text
    assert early.json()["retry_after"] == pytest.approx(0.1, abs=0.01)
    # ... and at it.
    clock.shift(0.1)
    again = await api.http.post("/api/v1/session/entries", json={"entry": entry("e3", 500)}, headers=bearer(impl))
    assert again.status_code == 200, again.text
    assert await history_ids("implementer") == ["e0", "e1", "e2", "e3"]


async def test_websocket_refusals_are_error_frames_in_entry_order_and_the_socket_stays_open(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_ENTRY_BYTES": 2000, "HISTORY_BYTES_PER_MINUTE": 3000}
    _, impl = await _member(api)
    agent = Agent(impl)
    await agent.connect()
    frames = []
    for e in (entry("w1"), entry("w2", 5000), entry("w3", 1200), entry("w4", 1200), entry("w5", 1200)):
        await agent.send({"type": "entry", "entry": e})
    for _ in range(5):
        frame = await agent.comm.receive_json_from(timeout=5)
        frames.append(frame)
    kinds = [(f["type"], f.get("entry_id"), f.get("error", {}).get("code")) for f in frames]
    assert kinds == [
        ("ack", "w1", None),
        ("error", "w2", "HISTORY_ENTRY_TOO_LARGE"),
        ("ack", "w3", None),
        ("ack", "w4", None),
        ("error", "w5", "HISTORY_QUOTA_EXCEEDED"),
    ]
    assert frames[1]["limit"] == 2000
    assert frames[4]["limit"] == {"bytes_per_minute": 3000} and frames[4]["retry_after"] > 0
    # Still open, and the quota's remainder takes a small entry.
    await agent.send({"type": "entry", "entry": entry("w6")})
    assert (await agent.expect("ack"))["entry_id"] == "w6"
    assert await history_ids("implementer") == ["w1", "w3", "w4", "w6"]
    await agent.close()


class HistoryLocked:
    """Holds a transaction that blocks every history insert (a real lock, from another
    connection): the writer's entries wait, unacknowledged, until it is released."""

    def __init__(self):
        self.ready, self.release, self.done = threading.Event(), threading.Event(), threading.Event()

    def _hold(self):
        try:
            with transaction.atomic():  # SQLite: BEGIN IMMEDIATE takes the write lock
                with connection.cursor() as cursor:
                    if connection.vendor == "postgresql":
                        cursor.execute(f"LOCK TABLE {HistoryEntry._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
                    else:
                        cursor.execute("SELECT 1")
                self.ready.set()
                self.release.wait(20)
        finally:
            connection.close()
            self.done.set()

    def __enter__(self):
        threading.Thread(target=self._hold, daemon=True).start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.done.wait(10)


async def test_websocket_unacknowledged_entries_are_capped_per_socket(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_ENTRIES_PER_REQUEST": 2}
    _, impl = await _member(api)
    agent = Agent(impl)
    await agent.connect()
    with HistoryLocked():
        for i in range(1, 4):
            await agent.send({"type": "entry", "entry": entry(f"f{i}")})
        # The third waits behind the two in flight: the socket handled all three frames, and
        # nothing is answered while they wait.
        await agent.settled()
        assert agent.buffer == []
    frames = [await agent.comm.receive_json_from(timeout=10) for _ in range(3)]
    assert [(f["type"], f.get("entry_id")) for f in frames] == [("ack", "f1"), ("ack", "f2"), ("error", "f3")]
    assert frames[2]["error"]["code"] == "TOO_MANY_ENTRIES" and frames[2]["limit"] == 2
    assert await history_ids("implementer") == ["f1", "f2"]
    await agent.close()


def test_quota_settings_refuse_what_is_not_a_positive_integer(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from tests.support.settings_env import settings_from_env

    for name in ("STEERBOARD_MAX_ENTRY_BYTES", "STEERBOARD_MAX_ENTRIES_PER_REQUEST", "STEERBOARD_HISTORY_BYTES_PER_MINUTE"):
        with pytest.raises(ImproperlyConfigured, match=name):
            settings_from_env(monkeypatch, **{name: "0"}, DEBUG="1")
        monkeypatch.delenv(name)


@pytest.mark.parametrize("start", [1_764_892_800.0, 1_764_892_800.123456789, 1_764_923_456.987654321])
def test_a_caller_that_waits_exactly_retry_after_is_let_through(start):
    """The seconds a refusal tells are rounded up, and the bucket forgives the clock's float
    error: whatever the sizes and the time of day, waiting exactly ``retry_after`` is enough
    (mailbox/plumbing/quota.py; rounded to the nearest millisecond, a retry at it was refused
    again, with a ``retry_after`` of 0)."""
    from mailbox.plumbing import quota

    now = [start]
    buckets = quota.Buckets()
    buckets.clock = lambda: now[0]
    rate, burst = 2000 / 60.0, 2000
    for size in (541, 539, 517, 600, 333, 701, 499, 1999, 2000):
        while (wait := buckets.take("m", size, rate=rate, burst=burst)) == 0.0:
            pass  # until the bucket refuses
        told = quota._retry_after(wait)
        assert told >= wait and told - wait < 0.001
        now[0] += told - 0.002  # not quite: still refused
        assert buckets.take("m", size, rate=rate, burst=burst) > 0.0
        now[0] += 0.002
        waited = buckets.take("m", size, rate=rate, burst=burst)
        assert waited == 0.0, (size, wait, told)
