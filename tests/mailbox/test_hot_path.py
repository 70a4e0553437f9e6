"""mailbox/engine/hot_path.py (SendJob, EntryJob, EntriesJob) and mailbox/plumbing/writer.py's group commit.

A send or an entry is stored by these jobs only, whether the writer runs them (the
transports) or the caller's thread does (a spawn prompt, recovery, management commands):
both must leave the same rows; a keyed send must leave what an unkeyed one leaves, plus a
key that replays its answer. The writer must commit what waits together, answer each
caller after its own commit, and never fail a job for its neighbour's fault.
"""
import asyncio
import threading

import pytest
from channels.db import database_sync_to_async

from mailbox.plumbing import db, events
from mailbox.engine import hot_path, idempotency
from mailbox.plumbing.writer import Job
from mailbox.models import HistoryEntry, IdempotencyRecord, LeadLogRecord, TeamMessage
from mailbox.operations import recovery
from mailbox.plumbing import wire
from teams import schemas
from teams.errors import TeamError
from teams.models import Member
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE_FIELDS = ["team_id", "sender_id", "target_id", "content", "seq", "thread_id", "reply_to", "kind", "state",
                  "attempts", "last_error"]


@database_sync_to_async
def member(team: str, name: str) -> Member:
    return Member.objects.select_related("team").get(team__name=team, name=name)


@database_sync_to_async
def row(message_id: str) -> dict:
    message = TeamMessage.objects.get(pk=message_id)
    return {f: getattr(message, f) for f in MESSAGE_FIELDS} | {
        "accepted": message.accepted_at is not None, "delivered": message.delivered_at is not None}


@database_sync_to_async
def log_of(message_id: str) -> list[tuple[str, dict]]:
    return [(r.kind, r.data) for r in LeadLogRecord.objects.filter(message_id=message_id).order_by("id")]


@database_sync_to_async
def sync_send(sender: Member, target: str, content: str) -> str:
    return hot_path.message_send_now(sender=sender, target_name=target, content=content)["message_id"]


@database_sync_to_async
def sync_entry(target: Member, entry: dict) -> bool:
    return hot_path.entry_record(member=target, entry=entry)


def entry_for(message_id: str, entry_id: str) -> dict:
    return {"id": entry_id, "kind": "user_message", "text": "t",
            "source": {"kind": "team-message", "message_id": message_id}}


def submit(target: Member, entry: dict):
    return hot_path.entry_submit(member=target, entry=wire.Entry.model_validate(entry))


def keyed(target: str, message: str, key: str) -> dict:
    args = schemas.SendMessageArgs(target=target, message=message, idempotency_key=key)
    return {"key": key, "fingerprint": idempotency.fingerprint(args)}


async def same_rows(first: str, second: str, *, seq_apart: int = 1) -> None:
    """Two messages to one target, ``seq_apart`` apart, left the same rows and records."""
    a, b = await row(first), await row(second)
    assert a.pop("seq") + seq_apart == b.pop("seq")
    assert a == b
    assert [k for k, _ in await log_of(first)] == [k for k, _ in await log_of(second)]
    assert [{**d, "seq": 0} for _, d in await log_of(first)] == [{**d, "seq": 0} for _, d in await log_of(second)]


async def test_the_writer_and_the_callers_thread_leave_the_same_rows(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("idle")
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")

    reference = await sync_send(lead, "implementer", "the same words")
    fast = await hot_path.message_send(sender=lead, target_name="implementer", content="the same words")
    assert fast["status"] == "accepted"
    await same_rows(reference, fast["message_id"])

    assert await sync_entry(target, entry_for(reference, "e-ref")) is True
    assert await submit(target, entry_for(fast["message_id"], "e-fast")) is True
    await same_rows(reference, fast["message_id"])
    assert (await row(reference))["state"] == "delivered"
    # A repeat folds on both, and nothing is marked twice.
    assert await sync_entry(target, entry_for(reference, "e-ref")) is False
    assert await submit(target, entry_for(fast["message_id"], "e-fast")) is False
    assert len(await log_of(fast["message_id"])) == 3
    await agent.close()


async def test_a_delivered_message_keeps_no_current_error_on_every_delivery_path(api):
    """Queued with a reason (no session, no host), then delivered by the caller's thread, by
    the writer, and by recovery's DeliveredJob: each is delivered with ``last_error`` empty,
    and its failure stays in its trace (the Lead log's ``message_failed`` record)."""
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")
    ids = [await sync_send(lead, "implementer", f"m{i}") for i in range(3)]
    for message_id in ids:
        waited = await row(message_id)
        assert waited["state"] == "queued" and "no host" in waited["last_error"], waited

    assert await sync_entry(target, entry_for(ids[0], "e-0")) is True
    assert await submit(target, entry_for(ids[1], "e-1")) is True
    # An entry stored without its mark (a crash between the two): recovery marks it.
    await database_sync_to_async(HistoryEntry.objects.create)(
        member=target, entry_id="e-2", kind="user_message", message_id=ids[2], data={"text": "m2"})
    assert await database_sync_to_async(recovery.messages_reconcile)() == 1
    for message_id in ids:
        delivered = await row(message_id)
        assert (delivered["state"], delivered["last_error"], delivered["delivered"]) == ("delivered", "", True)
        kinds = [k for k, _ in await log_of(message_id)]
        assert kinds == ["team/message/queued", "team/message/failed", "team/message/delivered"], kinds


async def test_a_keyed_send_leaves_what_an_unkeyed_one_leaves_and_its_key_replays_the_answer(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("idle")
    lead = await member("alpha", "lead")

    plain = await hot_path.message_send(sender=lead, target_name="implementer", content="the same words")
    first = await hot_path.message_send(
        sender=lead, target_name="implementer", content="the same words", **keyed("implementer", "the same words", "k1"))
    await same_rows(plain["message_id"], first["message_id"])
    assert first["idempotent_replay"] is False and first["status"] == "accepted"
    stored = await database_sync_to_async(lambda: IdempotencyRecord.objects.get(key="k1").result)()
    assert stored == first  # the key keeps the whole answer, written in the send's commit

    again = await hot_path.message_send(
        sender=lead, target_name="implementer", content="the same words", **keyed("implementer", "the same words", "k1"))
    assert again == {**first, "idempotent_replay": True}  # the first answer, delivery observation included
    with pytest.raises(TeamError) as refused:
        await hot_path.message_send(
            sender=lead, target_name="implementer", content="other words", **keyed("implementer", "other words", "k1"))
    assert refused.value.code == "IDEMPOTENCY_KEY_CONFLICT" and refused.value.extra == {"persisted": False}
    count = database_sync_to_async(lambda: TeamMessage.objects.filter(sender=lead).count())
    assert await count() == 2  # the replay and the conflict stored nothing
    await agent.close()


async def test_a_keyed_send_admitted_after_its_commit_keeps_the_answer_admission_gave(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")  # no session, no host: the message waits
    lead = await member("alpha", "lead")
    first = await hot_path.message_send(
        sender=lead, target_name="implementer", content="wait for me", **keyed("implementer", "wait for me", "k2"))
    assert first["status"] == "queued" and first["delivery"]["host_connected"] is False
    again = await hot_path.message_send(
        sender=lead, target_name="implementer", content="wait for me", **keyed("implementer", "wait for me", "k2"))
    assert again == {**first, "idempotent_replay": True}


async def test_a_send_that_finds_its_target_waiting_records_its_try_and_why_in_its_own_commit(api):
    # Issue 31: the send's own job writes attempt 1, last_error and the waiting observation;
    # nothing after its commit (admission) is needed for them, on either database, keyed or not.
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")  # provisioning; no session, no host
    lead = await member("alpha", "lead")
    reason = "implementer is provisioning and no host is connected to resume it"
    plain = hot_path.SendJob(sender=lead, target_name="implementer", content="the same words")
    keyed_job = hot_path.SendJob(
        sender=lead, target_name="implementer", content="the same words", **keyed("implementer", "the same words", "kw"))
    for job in (plain, keyed_job):
        await db.writer().run(job)  # the writer's job alone: no admission after it
        stored = await row(job.message_id)
        assert (stored["state"], stored["attempts"], stored["last_error"]) == ("queued", 1, reason)
        assert await log_of(job.message_id) == [
            ("team/message/queued", {"sender": "lead", "target": "implementer", "seq": job.seq}),
            ("team/message/failed", {"target": "implementer", "seq": job.seq, "error": reason, "waiting": True}),
        ]
    await same_rows(plain.message_id, keyed_job.message_id)
    # The caller's thread runs the same job and leaves the same rows; its admission then finds
    # the same reason and writes nothing more.
    now = await sync_send(lead, "implementer", "the same words")
    await same_rows(keyed_job.message_id, now)
    # A spawn prompt is stored, not sent: it tried nothing and says nothing.
    stored = await row(await database_sync_to_async(lambda: hot_path.message_store(
        sender=lead, target_name="implementer", content="stored only").id)())
    assert (stored["attempts"], stored["last_error"]) == (0, "")


async def test_a_refused_keyed_send_does_not_use_its_key_up(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_PER_TARGET": 1}
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    await hot_path.message_send(sender=lead, target_name="implementer", content="fills the mailbox")
    with pytest.raises(TeamError) as refused:
        await hot_path.message_send(sender=lead, target_name="implementer", content="x", **keyed("implementer", "x", "k3"))
    assert refused.value.code == "TEAM_MAILBOX_FULL"
    assert not await database_sync_to_async(IdempotencyRecord.objects.filter(key="k3").exists)()


async def test_one_key_sent_twice_in_one_batch_stores_one_message(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("idle")
    lead = await member("alpha", "lead")
    jobs = [hot_path.SendJob(sender=lead, target_name="implementer", content="once", **keyed("implementer", "once", "k4"))
            for _ in range(2)]
    results, batches = await _while_the_writer_is_held(jobs)
    assert batches == 1 and results == [None, None]
    assert jobs[0].replayed is None and jobs[1].replayed is not None
    assert jobs[1].replayed["message_id"] == jobs[0].message_id
    assert await database_sync_to_async(lambda: TeamMessage.objects.filter(content="once").count())() == 1
    await agent.close()


async def test_an_expired_key_is_used_again(api, settings):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    first = await hot_path.message_send(sender=lead, target_name="implementer", content="a", **keyed("implementer", "a", "k5"))
    from datetime import timedelta

    from django.utils import timezone

    await database_sync_to_async(lambda: IdempotencyRecord.objects.filter(key="k5").update(
        created_at=timezone.now() - idempotency.window() - timedelta(seconds=1)))()
    fresh = await hot_path.message_send(sender=lead, target_name="implementer", content="b", **keyed("implementer", "b", "k5"))
    assert fresh["idempotent_replay"] is False and fresh["message_id"] != first["message_id"]


async def test_the_send_and_entry_jobs_refuse_with_the_delivery_state_machines_words(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")
    for name, code in [("nobody", "TEAM_UNKNOWN_TARGET"), ("lead", "TEAM_SELF_MESSAGE")]:
        with pytest.raises(TeamError) as refused:
            await hot_path.message_send(sender=lead, target_name=name, content="x")
        assert refused.value.code == code and refused.value.extra == {"persisted": False}
    with pytest.raises(TeamError) as refused:
        await hot_path.message_send(sender=lead, target_name="implementer", content="x", reply_to="team-message-x")
    assert refused.value.code == "NOT_FOUND"
    # An entry for a message that was never addressed to this member stores nothing.
    other = (await hot_path.message_send(sender=target, target_name="lead", content="to the lead"))["message_id"]
    with pytest.raises(TeamError) as refused:
        await submit(target, entry_for(other, "stolen"))
    assert refused.value.code == "NOT_FOUND"
    assert not await database_sync_to_async(HistoryEntry.objects.filter(entry_id="stolen").exists)()
    # Several entries stop at the first refused one; those before it stay stored.
    acks, refusal = await hot_path.entries_submit(member=target, entries=[
        wire.Entry.model_validate({"id": "fine", "kind": "assistant_text", "text": "t"}),
        wire.Entry.model_validate(entry_for(other, "stolen-again")),
        wire.Entry.model_validate({"id": "after", "kind": "assistant_text", "text": "t"}),
    ])
    assert acks == [{"entry_id": "fine", "folded": False}] and refusal.code == "NOT_FOUND"
    stored = await database_sync_to_async(lambda: set(HistoryEntry.objects.values_list("entry_id", flat=True)))()
    assert "fine" in stored and not {"stolen-again", "after"} & stored


async def test_a_full_mailbox_is_refused_with_its_count(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_PER_TARGET": 2}
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    for i in range(2):
        await hot_path.message_send(sender=lead, target_name="implementer", content=f"m{i}")
    with pytest.raises(TeamError) as refused:
        await hot_path.message_send(sender=lead, target_name="implementer", content="one too many")
    assert refused.value.code == "TEAM_MAILBOX_FULL" and "already has 2" in refused.value.message


async def test_a_group_committed_batch_leaves_the_rows_single_jobs_leave(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("running")
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")
    single = (await hot_path.message_send(sender=lead, target_name="implementer", content="w"))["message_id"]
    batch = [hot_path.SendJob(sender=lead, target_name="implementer", content="w") for _ in range(3)]
    results, batches = await _while_the_writer_is_held(batch)
    assert batches == 1 and all(r is None for r in results)
    expected = await row(single)
    expected.pop("seq")
    for job in batch:
        got = await row(job.message_id)
        assert got.pop("seq") == job.seq
        assert got == expected
        assert [(k, {**d, "seq": 0}) for k, d in await log_of(job.message_id)] == [
            (k, {**d, "seq": 0}) for k, d in await log_of(single)]
    entries = [hot_path.EntryJob(member=target, entry=wire.Entry.model_validate(entry_for(m, f"e-{i}")))
               for i, m in enumerate([single] + [job.message_id for job in batch])]
    results, batches = await _while_the_writer_is_held(entries + [
        hot_path.EntryJob(member=target, entry=wire.Entry.model_validate(entry_for(single, "e-0")))])
    assert batches == 1 and results == [True, True, True, True, False]
    for m in [single] + [job.message_id for job in batch]:
        assert (await row(m))["state"] == "delivered"
        assert [k for k, _ in await log_of(m)] == [
            "team/message/queued", "team/message/accepted", "team/message/delivered"]
        assert dict((await log_of(m))[-1][1]) == {"target": "implementer", "seq": (await row(m))["seq"]}
    await agent.close()


class Broken(Job):
    def execute(self, batch):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM teams_member")


async def _while_the_writer_is_held(jobs):
    """Queue ``jobs`` while the writer is busy, so they wait together and commit as one batch."""
    writer = db.writer()
    release = threading.Event()
    held = writer.submit(release.wait, 10)
    futures = [writer.run(job) for job in jobs]
    before = writer.batches
    release.set()
    await asyncio.wrap_future(held)
    results = await asyncio.gather(*futures, return_exceptions=True)
    return results, writer.batches - before


async def test_what_waits_commits_together_and_a_broken_job_fails_alone(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    sends = [hot_path.SendJob(sender=lead, target_name="implementer", content=f"m{i}") for i in range(5)]
    results, batches = await _while_the_writer_is_held(sends)
    assert batches == 1  # five sends, one transaction
    assert [job.seq for job in sends] == [1, 2, 3, 4, 5]  # seq in submission order

    more = [hot_path.SendJob(sender=lead, target_name="implementer", content="before"), Broken(),
            hot_path.SendJob(sender=lead, target_name="implementer", content="after")]
    results, _ = await _while_the_writer_is_held(more)
    assert isinstance(results[1], Exception) and not isinstance(results[1], TeamError)
    stored = await database_sync_to_async(
        lambda: list(TeamMessage.objects.filter(content__in=["before", "after"]).order_by("seq").values_list("content", flat=True)))()
    assert stored == ["before", "after"]


async def test_tool_frames_on_the_session_websocket(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    lead = Agent(team["lead"])
    await lead.connect(None)  # tool calls need no hello
    target = Agent(impl)
    await target.connect("idle")

    await lead.send({"type": "tool", "id": "c1", "name": "send_message",
                     "arguments": {"target": "implementer", "message": "over the socket"}})
    answer = await lead.expect("tool_result")
    assert answer["id"] == "c1" and answer["result"]["status"] == "accepted"
    assert answer["result"]["delivery"]["target_status"] == "idle"
    steer = await target.expect("steer")
    assert steer["message"]["id"] == answer["result"]["message_id"]
    assert (await target.integrate(steer["message"]))["folded"] is False

    await lead.send({"type": "tool", "id": "c2", "name": "send_message",
                     "arguments": {"target": "nobody", "message": "x"}})
    refused = await lead.expect("tool_result")
    assert refused == {"type": "tool_result", "id": "c2", "persisted": False,
                       "error": {"code": "TEAM_UNKNOWN_TARGET", "message": refused["error"]["message"]}}
    await lead.send({"type": "tool", "id": "c3", "name": "no_such_tool", "arguments": {}})
    assert (await lead.expect("tool_result"))["error"]["code"] == "NOT_FOUND"
    await lead.send({"type": "tool", "id": "c4", "name": "list_agents"})
    assert {a["name"] for a in (await lead.expect("tool_result"))["result"]["agents"]} == {"lead", "implementer"}
    await lead.send({"type": "tool", "name": "list_agents"})  # no id: the frame itself is refused
    assert (await lead.expect("error"))["error"]["code"] == "VALIDATION_ERROR"
    await lead.close()
    await target.close()


async def test_a_waiting_tool_call_does_not_hold_up_the_socket(api, wait_reads):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    worker = Agent(impl)
    await worker.connect("running")  # a running peer: wait_agent has someone to wait for
    lead = Agent(team["lead"])
    await lead.connect("idle")
    await lead.send({"type": "tool", "id": "w", "name": "wait_agent", "arguments": {"timeout_ms": 10_000}})
    await wait_reads.reached(1)  # the wait has read what it compares with: it is waiting
    # While wait_agent waits, the same socket still sends, and the wait ends on the status change.
    await lead.send({"type": "tool", "id": "s", "name": "send_message",
                     "arguments": {"target": "implementer", "message": "hi"}})
    sent = await lead.expect("tool_result")
    assert sent["id"] == "s"
    await worker.status("idle")
    waited = await lead.expect("tool_result", timeout=10)
    assert waited["id"] == "w" and waited["result"]["timed_out"] is False
    await lead.close()
    await worker.close()


async def test_redelivery_backs_off_and_skips_a_session_that_holds_its_steers(api, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.STEERBOARD = {**settings.STEERBOARD, "REDELIVER_AFTER": 10}
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    await agent.connect("running")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="slow to integrate")
    await agent.expect("steer")
    target = await member("alpha", "implementer")

    def age(seconds: float, attempts: int) -> set[int]:
        TeamMessage.objects.filter(pk=sent["message_id"]).update(
            accepted_at=timezone.now() - timedelta(seconds=seconds), attempts=attempts)
        return recovery._redelivery_due(timezone.now() - timedelta(seconds=10))

    due = database_sync_to_async(age)
    # The session on this process holds the steer and has not reported it: no push again.
    assert await due(15, 1) == set()
    events.session_unregister((await member("alpha", "implementer")).session_channel)  # as if on another process
    assert await due(15, 1) == {target.pk}
    assert await due(15, 2) == set()  # the second push waits 3x
    assert await due(35, 2) == {target.pk}
    assert await due(35, 3) == set()  # the third and later wait 7x
    assert await due(75, 5) == {target.pk}
    await agent.close()


async def test_a_member_token_lookup_is_cached_within_its_bound(api, settings):
    from mailbox.plumbing import auth
    from teams.models import MemberToken

    team = await team_new()
    token = team["lead"]
    headers = [(b"authorization", f"Bearer {token}".encode())]
    settings.STEERBOARD = {**settings.STEERBOARD, "TOKEN_CACHE_SECONDS": 60}
    assert (await database_sync_to_async(auth.member_from_headers)(headers)).name == "lead"
    await database_sync_to_async(lambda: MemberToken.objects.all().delete())()
    # Deleted, but within the bound the process still knows it (the hot path skips the lookup) ...
    assert (await api.ok(token, "list_agents"))["agents"][0]["name"] == "lead"
    # ... and once the bound has passed, it is refused.
    auth._members.clear()
    refused = await api.tool(token, "list_agents")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHENTICATED"


async def test_an_unknown_token_is_never_cached(api):
    from mailbox.plumbing import auth

    await team_new()
    headers = [(b"authorization", b"Bearer sbm_not-a-token")]
    assert await database_sync_to_async(auth.member_from_headers)(headers) is None
    assert auth.member_cached("sbm_not-a-token") is None
