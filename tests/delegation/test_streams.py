"""delegation/streams.py: the streams of a team's A2A tasks share one watch per process,
which reads every followed task once per doorbell and wakes only the streams whose
task changed (issue 26, item 2), on the test run's channel layer and database."""
import asyncio
from mailbox.engine import hot_path
from mailbox.members import sessions

import pytest
from channels.db import database_sync_to_async

from delegation import streams
from delegation.credentials import caller_for_team, credential_create
from delegation.tasks import task_read, task_row, task_send, tasks_by_id
from teams.services import member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def two_tasks():
    team, lead, _, _ = team_create(name="crew")
    worker = member_spawn(lead=lead, name="worker", description="does the work", prompt="")
    sessions.session_hello(member_id=worker.pk, state="idle", channel="test.worker")
    _, token = credential_create(name="planner", teams=["crew"])
    caller = caller_for_team(token=token, team=team)
    first = task_send(member=worker, caller=caller, content="first", context_id="a")
    second = task_send(member=worker, caller=caller, content="second", context_id="b")
    return team, worker, task_read(task_row(first.pk)), task_read(task_row(second.pk))


@database_sync_to_async
def report(worker, **entry) -> None:
    hot_path.entry_record(member=worker, entry=entry)


async def until(predicate, what: str, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
    assert predicate(), what


async def test_many_streams_of_a_team_share_one_read_per_doorbell_and_only_the_changed_task_wakes_its_own():
    team, worker, first, second = await two_tasks()
    assert (first.state, second.state) == ("submitted", "submitted")
    woken: dict[str, list[str]] = {first.id: [], second.id: []}

    async def stream(view, opened: asyncio.Event) -> None:
        async with streams.following(view, team_id=team.pk, read=tasks_by_id) as follower:
            opened.set()
            woken[view.id].append((await follower.changed()).state)

    opened = [asyncio.Event() for _ in range(20)]
    followers = [asyncio.create_task(stream(first if n % 2 else second, opened[n])) for n in range(20)]
    for event in opened:
        await event.wait()
    watch = streams.watch_of(team.pk)
    await until(lambda: watch.reads >= 1, "the watch's first read")
    reads = watch.reads

    # The first task's turn starts: one doorbell, one read for all twenty streams.
    await report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    await report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=first.prompt_id, text="first")
    await until(lambda: len(woken[first.id]) == 10, "the first task's streams to wake")
    assert woken[first.id] == ["working"] * 10
    assert woken[second.id] == []  # the other task did not change: its streams were not woken
    assert watch.reads - reads < 10, "about one read per doorbell (two entries rang), not one per stream (20)"

    for task in followers:
        task.cancel()
    await asyncio.gather(*followers, return_exceptions=True)
    assert streams.watch_of(team.pk) is None  # the last stream gone, the watch stops listening


async def test_a_stream_stays_open_while_the_database_is_away_and_catches_up_after(monkeypatch):
    import django.db

    from delegation import tasks
    from mailbox.plumbing import outage

    team, worker, first, _ = await two_tasks()
    reads_failed = []
    real = tasks.tasks_by_id

    def away(**kwargs):
        reads_failed.append(1)
        raise django.db.OperationalError("server closed the connection unexpectedly")  # injected

    monkeypatch.setattr(tasks, "tasks_by_id", away)
    got = []

    async def stream() -> None:
        # Read through the module, as delegation/tasks.py's streams do: the patch below is seen.
        async with streams.following(first, team_id=team.pk, read=lambda **kw: tasks.tasks_by_id(**kw)) as follower:
            got.append((await follower.changed()).state)

    following = asyncio.create_task(stream())
    try:
        await until(lambda: len(reads_failed) >= 1, "a read that fails")
        await report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
        await report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=first.prompt_id, text="first")
        await until(lambda: len(reads_failed) >= 2, "a read on the doorbell, failing too")
        assert got == [] and not following.done()  # still open, nothing made up
        monkeypatch.setattr(tasks, "tasks_by_id", real)  # the database is back
        await until(lambda: got == ["working"], "the stream to catch up at the next read")
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        outage.database.ok()
