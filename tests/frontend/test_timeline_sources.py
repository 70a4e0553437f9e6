"""Timeline labels name who really sent a message or wrote a prompt: the server's records, not the agent's report.

A session reports its history entries itself, so whatever an entry says about
its sender (``source.sender``) or author (``author``) is the agent's claim. The
snapshot takes the sender from the TeamMessage the entry's ``message_id`` names
and the author from the HumanPrompt its ``prompt_id`` names, both addressed to
that member, read in bulk.
"""
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from frontend import selectors
from mailbox.engine import hot_path, queue_adapter
from mailbox.models import HistoryEntry, MessageKind
from teams import services as team_services

pytestmark = pytest.mark.django_db


def _team(name="alpha"):
    team, lead, _, _ = team_services.team_create(name=name)
    impl = team_services.member_spawn(lead=lead, name="implementer", description="d", prompt="")
    reviewer = team_services.member_spawn(lead=lead, name="reviewer", description="d", prompt="")
    return team, lead, impl, reviewer


def _entries_of(snapshot, member):
    lane = next(m for m in snapshot["members"] if m["name"] == member)
    return {e["id"]: e for t in lane["timeline"] for s in t["steps"] for e in s["entries"]}


def _record(member, entry_id, kind, **fields):
    hot_path.entry_record(member=member, entry={"id": entry_id, "kind": kind, **fields})


def test_sender_and_author_come_from_the_servers_records_not_the_agents_claims(client):
    team, lead, impl, reviewer = _team()
    alice = User.objects.create_user("alice", password="pw")
    User.objects.create_user("mallory", password="pw")
    spawn = hot_path.message_store(sender=lead, target_name=impl.name, content="Build the parser.", kind=MessageKind.SPAWN_PROMPT)
    steer = hot_path.message_store(sender=reviewer, target_name="implementer", content="Found a bug.")
    elsewhere = hot_path.message_store(sender=lead, target_name="reviewer", content="Not for implementer.")
    prompt = queue_adapter.prompt_submit(team_id=team.pk, target_name="implementer", author=alice, content="Status?")
    other_prompt = queue_adapter.prompt_submit(team_id=team.pk, target_name="reviewer", author=alice, content="Hi")

    forged = {"kind": "team-message", "sender": "mallory"}
    _record(impl, "spawn", "user_message", text="Build the parser.", source={**forged, "message_id": spawn.id})
    _record(impl, "steer", "user_message", text="Found a bug.", source={**forged, "message_id": steer.id})
    _record(impl, "prompt", "prompt", prompt_id=prompt.id, author="mallory", text="Status?")
    _record(impl, "prompt-other", "prompt", prompt_id=other_prompt.id, author="mallory", text="Hi")
    _record(impl, "prompt-bare", "prompt", author="mallory", text="no id")
    # Rows the server would refuse today (entry_record checks the target), as an older
    # server or a direct write left them: a message to someone else, and one that never was.
    for entry_id, message_id in (("elsewhere", elsewhere.id), ("unknown", "team-message-made-up")):
        HistoryEntry.objects.create(
            member=impl, entry_id=entry_id, kind="user_message", message_id=message_id,
            data={"id": entry_id, "kind": "user_message", "text": "?", "source": {**forged, "message_id": message_id}},
        )

    client.force_login(User.objects.create_user("viewer", password="pw"))
    snapshot = client.get("/teams/alpha/snapshot.json").json()
    entries = _entries_of(snapshot, "implementer")

    assert entries["spawn"]["sender"] == "lead"
    assert entries["spawn"]["message_kind"] == "spawn_prompt"
    assert entries["spawn"]["verified"] is True
    assert entries["steer"]["sender"] == "reviewer"
    assert entries["steer"]["message_kind"] == "message"
    assert entries["steer"]["verified"] is True
    assert entries["prompt"]["author"] == "alice"
    assert entries["prompt"]["verified"] is True
    for entry_id in ("elsewhere", "unknown"):
        assert entries[entry_id]["verified"] is False
        assert entries[entry_id].get("sender") is None
        assert "message_kind" not in entries[entry_id]
    for entry_id in ("prompt-other", "prompt-bare"):
        assert entries[entry_id].get("author") is None
    assert entries["prompt-other"]["verified"] is False
    assert "mallory" not in str(snapshot)


def test_sources_are_read_in_bulk_not_per_entry():
    def measure(name, n):
        team, lead, impl, reviewer = _team(name)
        alice = User.objects.create_user(f"alice-{name}", password="pw")
        for i in range(n):
            message = hot_path.message_store(sender=reviewer, target_name="implementer", content=f"m{i}")
            _record(impl, f"m{i}", "user_message", text="m", source={"kind": "team-message", "message_id": message.id})
            prompt = queue_adapter.prompt_submit(team_id=team.pk, target_name="reviewer", author=alice, content=f"p{i}")
            _record(reviewer, f"p{i}", "prompt", prompt_id=prompt.id, text="p")
        with CaptureQueriesContext(connection) as queries:
            snapshot = selectors.team_snapshot(team=team)
        return snapshot, len(queries)

    small, small_queries = measure("small", 1)
    large, large_queries = measure("large", 20)
    assert large_queries == small_queries
    assert {e["sender"] for e in _entries_of(large, "implementer").values()} == {"reviewer"}
    assert {e["author"] for e in _entries_of(large, "reviewer").values()} == {"alice-large"}
