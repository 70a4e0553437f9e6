"""mailbox/plumbing/loop_writer.py: the writer's batches on the event loop's own asyncio
connection (PostgreSQL). It must leave what the writer thread leaves, hand what it cannot
pipe (a refusal's reason, a reply's thread, a job without a statement) to the thread whole
and in order, and outlive its connection. Real PostgreSQL; a LoopWriter of the test's own
over the process's writer thread, whatever ``ASYNC_WRITER`` the run has."""
import asyncio
import threading

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from mailbox.engine import hot_path, hot_sql, idempotency
from mailbox.models import IdempotencyRecord, LeadLogRecord, TeamMessage
from mailbox.plumbing import db, wire
from mailbox.plumbing.loop_writer import LoopWriter
from teams import schemas
from teams.errors import TeamError
from teams.models import Member
from tests.support.inproc import Agent, spawn, team_new
from tests.support.live import postgres_run_only

pytestmark = [
    postgres_run_only("the loop's writer is PostgreSQL's (psycopg's asyncio connection)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
async def loop_writer():
    found = LoopWriter(thread=db.writer(), run_batch=hot_sql.loop_batch, connect=db.loop_connect)
    yield found
    found.close_all()


@database_sync_to_async
def member(team: str, name: str) -> Member:
    return Member.objects.select_related("team").get(team__name=team, name=name)


@database_sync_to_async
def states(*message_ids: str) -> list[tuple[str, int]]:
    return [(m.state, m.seq) for m in (TeamMessage.objects.get(pk=i) for i in message_ids)]


@database_sync_to_async
def kinds_logged(message_id: str) -> list[str]:
    return list(LeadLogRecord.objects.filter(message_id=message_id).order_by("id").values_list("kind", flat=True))


def send(sender: Member, content: str, target: str = "implementer", **more) -> hot_path.SendJob:
    return hot_path.SendJob(sender=sender, target_name=target, content=content, **more)


def delivered_by(target: Member, message_id: str, entry_id: str) -> hot_path.EntryJob:
    return hot_path.EntryJob(member=target, entry=wire.Entry.model_validate({
        "id": entry_id, "kind": "user_message", "text": "t",
        "source": {"kind": "team-message", "message_id": message_id}}))


async def test_sends_and_their_entries_commit_on_the_loop_as_the_writer_thread_commits_them(api, loop_writer):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("idle")
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")

    jobs = [send(lead, f"m{i}") for i in range(3)]
    assert await asyncio.gather(*loop_writer.run_all(jobs)) == [None] * 3
    assert (loop_writer.batches, loop_writer.handed) == (1, 0)  # one transaction, on the loop
    assert [job.seq for job in jobs] == [1, 2, 3] and all(job.admitted for job in jobs)
    pushed = [(await agent.expect("steer"))["message"]["id"] for _ in jobs]
    assert pushed == [job.message_id for job in jobs]  # pushed after the commit, in seq order

    entries = [delivered_by(target, job.message_id, f"e{i}") for i, job in enumerate(jobs)]
    assert await asyncio.gather(*loop_writer.run_all(entries)) == [True] * 3
    assert loop_writer.handed == 0
    assert await states(*(job.message_id for job in jobs)) == [("delivered", 1), ("delivered", 2), ("delivered", 3)]
    for job in jobs:
        assert await kinds_logged(job.message_id) == [
            "team/message/queued", "team/message/accepted", "team/message/delivered"]
    # A repeat folds, on the loop too.
    assert await loop_writer.run(delivered_by(target, jobs[0].message_id, "e0")) is False
    await agent.close()


async def test_a_refusal_goes_to_the_writer_thread_with_its_batch_and_its_neighbours_commit(api, loop_writer, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_PER_TARGET": 2}
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    args = schemas.SendMessageArgs(target="implementer", message="x", idempotency_key="k1")
    jobs = [send(lead, "a"), send(lead, "b", target="nobody"), send(lead, "c"),
            send(lead, "x", key="k1", fingerprint=idempotency.fingerprint(args))]
    results = await asyncio.gather(*loop_writer.run_all(jobs), return_exceptions=True)
    assert (loop_writer.batches, loop_writer.handed) == (0, 1)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], TeamError) and results[1].code == "TEAM_UNKNOWN_TARGET"
    assert isinstance(results[3], TeamError) and results[3].code == "TEAM_MAILBOX_FULL"
    assert [jobs[0].seq, jobs[2].seq] == [1, 2]
    # The refused keyed send did not use its key up (its claim was undone in the same transaction).
    assert not await database_sync_to_async(IdempotencyRecord.objects.filter(key="k1").exists)()


async def test_batches_stay_in_order_when_one_waits_for_the_writer_thread(api, loop_writer):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    first = send(lead, "first")
    await loop_writer.run(first)
    answered = []
    release = threading.Event()
    held = db.writer().submit(release.wait, 10)  # the thread is busy: a handed batch waits for it
    reply = send(lead, "a reply", reply_to=first.message_id)  # a reply looks up its thread: no piped statement
    after = [send(lead, f"after {i}") for i in range(2)]
    futures = loop_writer.run_all([reply])
    await asyncio.sleep(0.05)  # its batch is with the thread now; the next sends form the next batch
    futures += loop_writer.run_all(after)
    for job, future in zip([reply, *after], futures):
        future.add_done_callback(lambda _, job=job: answered.append(job))
    await asyncio.sleep(0.2)
    assert answered == [] and loop_writer.handed == 1  # the later sends wait behind the handed batch
    release.set()
    await asyncio.wrap_future(held)
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(results[0], TeamError) and results[0].code == "NOT_FOUND"  # the lead received no such message
    assert results[1:] == [None, None]
    assert [job.seq for job in after] == [2, 3]
    assert answered == [reply, *after]
    assert (loop_writer.batches, loop_writer.handed) == (2, 1)


async def test_a_lost_connection_fails_no_job_and_the_next_batch_opens_a_fresh_one(api, loop_writer):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    lead = await member("alpha", "lead")
    await loop_writer.run(send(lead, "opens the connection"))
    here = next(iter(loop_writer._loops.values()))
    pid = here.conn.info.backend_pid

    @database_sync_to_async
    def terminate():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        connection.close()

    await terminate()
    lost = send(lead, "sent as the connection went away")
    assert await loop_writer.run(lost) is None  # the writer thread ran it
    assert (loop_writer.batches, loop_writer.handed) == (1, 1)
    fresh = send(lead, "on a fresh connection")
    await loop_writer.run(fresh)
    assert loop_writer.batches == 2 and here.conn.info.backend_pid != pid
    assert [seq for _, seq in await states(lost.message_id, fresh.message_id)] == [2, 3]
