"""mailbox/engine/idempotency.py: idempotency keys on send_message and team_task_create."""
import asyncio
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.utils import timezone

from mailbox.engine.idempotency import keys_prune
from mailbox.models import IdempotencyRecord, LeadLogRecord, TeamMessage
from teams.models import Task
from tests.support.inproc import spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def message_count() -> int:
    return TeamMessage.objects.count()


@database_sync_to_async
def queued_records() -> int:
    return LeadLogRecord.objects.filter(kind="team/message/queued").count()


@database_sync_to_async
def task_count() -> int:
    return Task.objects.count()


@database_sync_to_async
def age_keys(days: float) -> None:
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(days=days))


async def test_same_key_and_arguments_replays_the_stored_result_and_stores_nothing_new(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    first = await api.ok(team["lead"], "send_message", target="implementer", message="task-1", idempotency_key="k-1")
    assert first["idempotent_replay"] is False
    again = await api.ok(team["lead"], "send_message", target="implementer", message="task-1", idempotency_key="k-1")
    assert again["idempotent_replay"] is True
    assert again["message_id"] == first["message_id"]
    # The stored result, observations included: what the server saw the first time.
    assert {k: v for k, v in again.items() if k != "idempotent_replay"} == {
        k: v for k, v in first.items() if k != "idempotent_replay"
    }
    assert await message_count() == 1
    assert await queued_records() == 1


async def test_same_key_with_different_arguments_is_a_conflict_and_stores_nothing(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    await api.ok(team["lead"], "send_message", target="implementer", message="task-1", idempotency_key="k-1")
    clash = await api.tool(team["lead"], "send_message", target="implementer", message="task-2", idempotency_key="k-1")
    assert clash.status_code == 409
    assert clash.json()["error"]["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert clash.json()["persisted"] is False
    assert await message_count() == 1


async def test_concurrent_calls_with_one_key_make_one_message(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    calls = [
        api.tool(team["lead"], "send_message", target="implementer", message="only once", idempotency_key="race")
        for _ in range(6)
    ]
    responses = await asyncio.gather(*calls)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    bodies = [r.json() for r in responses]
    assert len({b["message_id"] for b in bodies}) == 1
    assert sorted(b["idempotent_replay"] for b in bodies) == [False] + [True] * 5
    assert await message_count() == 1
    assert await queued_records() == 1


async def test_keys_claimed_in_one_batch_each_keep_their_own_answer(api):
    """Sends with different keys committed together: each key stores its own send's answer
    (the batch writes every claimed key's answer in one statement at its end)."""
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    keys = [f"batch-{i}" for i in range(6)]
    calls = [api.ok(team["lead"], "send_message", target="implementer", message=f"m-{k}", idempotency_key=k)
             for k in keys]
    firsts = await asyncio.gather(*calls)
    again = [await api.ok(team["lead"], "send_message", target="implementer", message=f"m-{k}", idempotency_key=k)
             for k in keys]
    assert [a["idempotent_replay"] for a in again] == [True] * 6
    for first, replay in zip(firsts, again):
        assert {k: v for k, v in replay.items() if k != "idempotent_replay"} == {
            k: v for k, v in first.items() if k != "idempotent_replay"
        }
    assert await message_count() == 6


async def test_keys_are_scoped_to_the_sending_member(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "reviewer")
    a = await api.ok(team["lead"], "send_message", target="reviewer", message="look", idempotency_key="same")
    b = await api.ok(impl, "send_message", target="reviewer", message="look", idempotency_key="same")
    assert a["message_id"] != b["message_id"]
    assert a["idempotent_replay"] is b["idempotent_replay"] is False
    assert await message_count() == 2


async def test_keys_are_scoped_to_the_tool(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="same")
    created = await api.ok(team["lead"], "team_task_create", subject="s", description="d", idempotency_key="same")
    assert sent["idempotent_replay"] is False and created["idempotent_replay"] is False
    assert await message_count() == 1 and await task_count() == 1


async def test_task_create_replays_and_conflicts_like_a_send(api):
    team = await team_new()
    first = await api.ok(team["lead"], "team_task_create", subject="build", description="d", idempotency_key="t-1")
    again = await api.ok(team["lead"], "team_task_create", subject="build", description="d", idempotency_key="t-1")
    assert again["idempotent_replay"] is True and first["idempotent_replay"] is False
    assert again["task"] == first["task"]
    assert await task_count() == 1
    clash = await api.tool(team["lead"], "team_task_create", subject="other", description="d", idempotency_key="t-1")
    assert clash.status_code == 409
    assert clash.json()["error"]["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert "persisted" not in clash.json()
    # Without a key every call creates.
    await api.ok(team["lead"], "team_task_create", subject="build", description="d")
    assert await task_count() == 2


async def test_a_refused_call_does_not_use_up_its_key(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    refused = await api.tool(team["lead"], "send_message", target="nobody", message="hi", idempotency_key="k")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "TEAM_UNKNOWN_TARGET"
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="k")
    assert sent["idempotent_replay"] is False
    assert await message_count() == 1


async def test_an_expired_key_runs_the_call_again(api, settings):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    first = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="old")
    await age_keys(days=8)
    again = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="old")
    assert again["idempotent_replay"] is False
    assert again["message_id"] != first["message_id"]
    assert await message_count() == 2


async def test_the_window_is_a_setting(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "IDEMPOTENCY_WINDOW": 3600}
    team = await team_new()
    await api.ok(team["lead"], "team_task_create", subject="s", description="d", idempotency_key="k")
    await age_keys(days=0.1)  # 2.4 hours: past a one-hour window
    again = await api.ok(team["lead"], "team_task_create", subject="s", description="d", idempotency_key="k")
    assert again["idempotent_replay"] is False
    assert await task_count() == 2


async def test_pruning_removes_expired_keys_only(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    await api.ok(team["lead"], "send_message", target="implementer", message="a", idempotency_key="old-1")
    await api.ok(team["lead"], "send_message", target="implementer", message="b", idempotency_key="old-2")
    await age_keys(days=8)
    await api.ok(team["lead"], "send_message", target="implementer", message="c", idempotency_key="fresh")
    assert await database_sync_to_async(keys_prune)() == 2
    keys = await database_sync_to_async(lambda: list(IdempotencyRecord.objects.values_list("key", flat=True)))()
    assert keys == ["fresh"]
    # The messages themselves stay: pruning forgets keys, never mail.
    assert await message_count() == 3


def test_the_management_command_prunes(db, capsys):
    from teams.services import team_create

    team, lead, _, _ = team_create(name="beta")
    IdempotencyRecord.objects.create(
        member=lead, tool="send_message", key="k", fingerprint="f", created_at=timezone.now() - timedelta(days=30)
    )
    call_command("idempotency_prune")
    assert '"pruned": 1' in capsys.readouterr().out
    assert IdempotencyRecord.objects.count() == 0


async def test_a_replay_before_the_first_call_finished_admission_answers_what_is_known(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    first = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="k")
    # As if the first call were still admitting (or its process died after the commit).
    await database_sync_to_async(
        lambda: IdempotencyRecord.objects.update(result={"message_id": first["message_id"], "thread_id": first["thread_id"]})
    )()
    again = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="k")
    assert again["idempotent_replay"] is True
    assert again["message_id"] == first["message_id"]
    assert again["status"] == "queued"
    assert any("do not resend" in w for w in again["delivery"]["warnings"])
    assert await message_count() == 1


@pytest.mark.parametrize("key", ["", "x" * 129, "tab\there", "new\nline", "é"])
async def test_malformed_keys_are_refused(api, key):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    refused = await api.tool(team["lead"], "send_message", target="implementer", message="hi", idempotency_key=key)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "VALIDATION_ERROR"
    assert refused.json()["persisted"] is False
    assert await message_count() == 0
    ok = await api.ok(team["lead"], "send_message", target="implementer", message="hi", idempotency_key="x" * 128)
    assert ok["idempotent_replay"] is False


def test_the_sweeper_prunes_when_the_process_starts_and_then_hourly(db, monkeypatch):
    from mailbox.engine import idempotency
    from mailbox.operations import recovery
    from teams.services import team_create

    _, lead, _, _ = team_create(name="gamma")

    def expired_key(key: str) -> None:
        IdempotencyRecord.objects.create(
            member=lead, tool="send_message", key=key, fingerprint="f", created_at=timezone.now() - timedelta(days=8)
        )

    monkeypatch.setattr(idempotency, "_pruned_at", None)  # a process that just started
    expired_key("a")
    recovery.recovery_pass()
    assert IdempotencyRecord.objects.count() == 0

    expired_key("b")
    recovery.recovery_pass()  # within the hour: left for the next prune
    assert IdempotencyRecord.objects.count() == 1

    # An hour on: the last prune an hour back (not the process's time.monotonic patched,
    # which its event loops and threads read too).
    monkeypatch.setattr(idempotency, "_pruned_at", idempotency._pruned_at - idempotency.PRUNE_EVERY - 1)
    recovery.recovery_pass()
    assert IdempotencyRecord.objects.count() == 0


def test_the_fingerprint_of_a_calls_arguments_never_changes():
    """A stored key's fingerprint is compared with a retry's for the whole window, across
    upgrades: the canonical JSON it hashes (keys sorted, no spaces, defaults in, the key
    out) is fixed here, byte for byte."""
    import hashlib

    from mailbox.engine.idempotency import fingerprint
    from teams.schemas import SendMessageArgs

    arguments = SendMessageArgs(target="impl", message="héllo \"team\"", idempotency_key="k-1")
    canonical = '{"message":"h\\u00e9llo \\"team\\"","reply_to":null,"target":"impl"}'
    assert fingerprint(arguments) == hashlib.sha256(canonical.encode()).hexdigest()
