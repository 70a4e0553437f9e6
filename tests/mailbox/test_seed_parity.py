"""Team semantics the seed pins down (issue 18), over the real ASGI app: the spawn
prompt as the teammate's first turn, wait_agent on task changes, failed members."""
import asyncio
import contextlib

import pytest
from channels.db import database_sync_to_async
from django.core.exceptions import ImproperlyConfigured

from mailbox.plumbing import events
from mailbox.models import HistoryEntry, LeadLogRecord, TeamMessage
from teams.models import Member
from tests.support.inproc import Agent, manage_json, spawn, team_new
from tests.support.settings_env import settings_from_env

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def inbox_of(name: str) -> list[tuple]:
    return list(
        TeamMessage.objects.filter(target__name=name).order_by("seq").values_list("seq", "kind", "state", "content")
    )


@database_sync_to_async
def phase_of(name: str) -> str:
    return Member.objects.get(name=name).phase


async def start_failure_handled(error: str) -> None:
    """The host's start_failed frame is handled: its Lead-log record is committed, in the
    transaction that fails the member (mailbox/members/hosts.host_start_failed)."""
    recorded = database_sync_to_async(lambda: LeadLogRecord.objects.filter(data__start_failed=error).exists())
    for _ in range(200):
        if await recorded():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"the start failure {error!r} was not recorded")


# --- 1. the spawn prompt -------------------------------------------------------------------------
async def test_the_spawn_prompt_is_the_teammates_first_turn_delivered_once(api):
    team = await team_new()
    await api.ok(team["lead"], "spawn_teammate", name="researcher", description="researches", prompt="Find X.")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    start = await host.expect("start")
    assert (start["member"], start["reason"]) == ("researcher", "provision")

    session = Agent(start["token"])
    welcome = await session.connect("idle")
    assert welcome["replay"] == 1
    steer = (await session.expect("steer"))["message"]
    assert (steer["sender"], steer["content"], steer["seq"], steer["kind"]) == ("lead", "Find X.", 1, "spawn_prompt")
    await session.status("running")
    await session.integrate(steer)
    await session.status("idle")
    assert await inbox_of("researcher") == [(1, "spawn_prompt", "delivered", "Find X.")]
    history = await database_sync_to_async(
        lambda: list(HistoryEntry.objects.filter(member__name="researcher").values_list("kind", "message_id"))
    )()
    assert history == [("user_message", steer["id"])]  # in its timeline, as a message from the Lead
    await session.close()

    # A resume never repeats it.
    sent = await api.ok(team["lead"], "send_message", target="researcher", message="next")
    resume = await host.expect("start")
    assert resume["reason"] == "resume"
    resumed = Agent(resume["token"])
    assert (await resumed.connect("idle"))["replay"] == 1
    again = (await resumed.expect("steer"))["message"]
    assert again["id"] == sent["message_id"] and again["kind"] == "message"
    assert await resumed.nothing("steer")
    await resumed.close()
    await host.close()


async def test_the_spawn_prompt_survives_a_host_that_dies_before_the_start(api):
    team = await team_new()
    dying = Agent(team["host"], path="/ws/host/")
    await dying.connect(status=None)
    await api.ok(team["lead"], "spawn_teammate", name="researcher", description="researches", prompt="Find X.")
    assert (await dying.expect("start"))["member"] == "researcher"
    await dying.close()  # gone before it started anyone

    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    start = await host.expect("start")
    assert (start["member"], start["reason"]) == ("researcher", "provision")
    session = Agent(start["token"])
    await session.connect("idle")
    steer = (await session.expect("steer"))["message"]
    assert steer["content"] == "Find X." and steer["kind"] == "spawn_prompt"
    await session.integrate(steer)
    assert await inbox_of("researcher") == [(1, "spawn_prompt", "delivered", "Find X.")]
    await session.close()
    await host.close()


async def test_a_blank_spawn_prompt_is_no_first_turn_and_a_huge_one_is_refused(api, settings):
    team = await team_new()
    await api.ok(team["lead"], "spawn_teammate", name="quiet", description="waits", prompt="  ")
    assert await inbox_of("quiet") == []
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_MESSAGE_BYTES": 100}
    response = await api.tool(team["lead"], "spawn_teammate", name="loud", description="d", prompt="é" * 60)
    assert response.status_code == 413 and response.json()["error"]["code"] == "TEAM_MESSAGE_TOO_LARGE"
    assert not await database_sync_to_async(Member.objects.filter(name="loud").exists)()  # nothing half-made


# --- 2. wait_agent wakes on the task board, by doorbell, capped ----------------------------------
@pytest.fixture
def no_recheck(settings):
    """Only a doorbell can wake a wait within the test's bounds."""
    settings.STEERBOARD = {**settings.STEERBOARD, "WAIT_RECHECK_INTERVAL": 60.0}


async def _running_teammate(api, team):
    token = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(token)
    await agent.connect("running")
    return token, agent


async def doorbells_rung(team) -> None:
    """Until every doorbell of the team rung so far has gone out (mailbox/plumbing/events.rings_pending).
    A wait that starts after this hears only its own subscribe."""
    async with asyncio.timeout(5):
        while events.rings_pending(team["team"].pk):
            await asyncio.sleep(0.01)


async def reads_within(wait_reads, seconds: float) -> int:
    """The waits' reads over the next ``seconds`` (returns at the first one)."""
    before = wait_reads.count
    with contextlib.suppress(TimeoutError):
        await wait_reads.reached(before + 1, timeout=seconds)
    return wait_reads.count - before


@pytest.mark.parametrize("by", ["teammate", "lead"])
async def test_wait_agent_wakes_when_a_task_changes(api, no_recheck, wait_reads, by):
    team = await team_new()
    impl, agent = await _running_teammate(api, team)
    task = (await api.ok(impl, "team_task_create", subject="s", description="d"))["task"]
    await api.ok(impl, "team_task_update", task_id=task["id"], expected_revision=1, action="claim")
    waiting = asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=30_000))
    await wait_reads.reached()  # the wait has read the board it compares with
    assert not waiting.done()
    if by == "teammate":
        await api.ok(impl, "team_task_update", task_id=task["id"], expected_revision=2, action="complete")
    else:
        await api.ok(team["lead"], "team_task_create", subject="more", description="d")
    assert await asyncio.wait_for(waiting, 3) == {"timed_out": False, "no_progress": None}
    await agent.close()


async def test_wait_agent_reads_the_database_per_doorbell_not_per_tick(api, no_recheck, wait_reads):
    team = await team_new()
    _, agent = await _running_teammate(api, team)
    await doorbells_rung(team)  # the spawn's and the connect's: from here the team is quiet
    waiting = asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=30_000))
    await wait_reads.reached(2)  # its first read, and the one its listener's subscribe wakes
    # A quiet team: no doorbell, no read (the old poll read every 0.2 s).
    assert await reads_within(wait_reads, 1.5) == 0
    assert not waiting.done()
    await agent.status("idle")
    assert await asyncio.wait_for(waiting, 3) == {"timed_out": False, "no_progress": None}
    await agent.close()


async def test_concurrent_waits_are_capped_per_member(api, no_recheck, settings, wait_reads):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_WAITS_PER_MEMBER": 2}
    team = await team_new()
    impl, agent = await _running_teammate(api, team)
    await doorbells_rung(team)  # a quiet team: each wait's reads below are its own
    waits = [asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=30_000))]
    await wait_reads.reached(2)  # the first wait holds its place (read, subscribed, read again)
    waits.append(asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=30_000)))
    await wait_reads.reached(3)  # so does the second (the team is subscribed already: one read)
    third = await api.tool(team["lead"], "wait_agent", timeout_ms=30_000)
    assert third.status_code == 429
    assert third.json()["error"]["code"] == "TOO_MANY_WAITS" and third.json()["limit"] == 2
    # Another member's waits are its own (this one has nobody active to wait for: it answers at once).
    other = await api.ok(impl, "wait_agent", timeout_ms=30_000)
    assert other == {"timed_out": False, "no_progress": {"reason": "no-active-peer"}}
    await api.ok(team["lead"], "spawn_teammate", name="researcher", description="r", prompt="")
    for wait in waits:
        assert (await asyncio.wait_for(wait, 3))["timed_out"] is False
    # Returned waits free their places.
    read_before = wait_reads.count  # every earlier wait has returned: the next read is the new wait's
    freed = asyncio.create_task(api.ok(team["lead"], "wait_agent", timeout_ms=10_000))
    await wait_reads.reached(read_before + 1)
    await api.ok(team["lead"], "spawn_teammate", name="again", description="r", prompt="")
    assert (await asyncio.wait_for(freed, 3))["timed_out"] is False
    await agent.close()


# --- 7. failed members ---------------------------------------------------------------------------
async def test_a_failed_member_takes_no_message_and_nothing_is_stored(api):
    team = await team_new()
    await api.ok(team["lead"], "spawn_teammate", name="broken", description="never starts", prompt="")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await host.expect("start")
    await host.send({"type": "start_failed", "member": "broken", "error": "no such image"})
    await start_failure_handled("no such image")
    assert await phase_of("broken") == "failed"
    for key in (None, "k-1"):  # the hot path and the keyed path answer alike
        args = {"target": "broken", "message": "hello?"} | ({"idempotency_key": key} if key else {})
        response = await api.tool(team["lead"], "send_message", **args)
        assert response.status_code == 409, response.text
        body = response.json()
        assert body["error"]["code"] == "TEAM_TARGET_FAILED" and body["persisted"] is False
    assert await inbox_of("broken") == []

    # An operator's retry asks a host to provision it again; once up it takes messages.
    op = await manage_json("operator_create", "op")
    retried = await api.http.post(
        "/api/v1/teams/alpha/members/broken/retry", headers={"Authorization": f"Token {op['token']}"}
    )
    assert retried.status_code == 200, retried.text
    start = await host.expect("start")
    assert (start["member"], start["reason"]) == ("broken", "provision")
    session = Agent(start["token"])
    await session.connect("idle")
    assert await phase_of("broken") == "active"
    sent = await api.ok(team["lead"], "send_message", target="broken", message="welcome back")
    assert sent["status"] == "accepted"
    await session.close()
    await host.close()


async def test_a_teammate_that_has_run_stays_inactive_when_a_resume_fails(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    first = Agent(impl)
    await first.connect("idle")
    await first.close()
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    await api.ok(team["lead"], "send_message", target="implementer", message="wake up")
    assert (await host.expect("start"))["reason"] == "resume"
    await host.send({"type": "start_failed", "member": "implementer", "error": "disk full"})
    await start_failure_handled("disk full")
    assert await phase_of("implementer") == "active"
    roster = await api.ok(team["lead"], "list_agents")
    assert {a["name"]: a["status"] for a in roster["agents"]}["implementer"] == "inactive"
    # Still reachable: a message is stored for recovery.
    assert (await api.ok(team["lead"], "send_message", target="implementer", message="again"))["status"] in (
        "accepted",
        "queued",
    )
    failed = await database_sync_to_async(
        lambda: LeadLogRecord.objects.filter(data__start_failed="disk full").count()
    )()
    assert failed == 1
    await host.close()


# --- 8. the roster bound and the limits' validation ----------------------------------------------
async def test_the_roster_holds_eight_teammates_by_default_the_lead_not_counted(api):
    team = await team_new()
    for i in range(8):
        await api.ok(team["lead"], "spawn_teammate", name=f"m-{i}", description="d", prompt="")
    ninth = await api.tool(team["lead"], "spawn_teammate", name="m-8", description="d", prompt="")
    assert ninth.status_code == 409 and ninth.json()["error"]["code"] == "TEAM_ROSTER_FULL"
    assert "8 teammates" in ninth.json()["error"]["message"]
    roster = await api.ok(team["lead"], "list_agents")
    assert len(roster["agents"]) == 9  # the Lead and its eight teammates


async def test_with_max_members_2_the_third_teammate_is_refused(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_MEMBERS_PER_TEAM": 2}
    team = await team_new()
    await api.ok(team["lead"], "spawn_teammate", name="one", description="d", prompt="")
    await api.ok(team["lead"], "spawn_teammate", name="two", description="d", prompt="")
    third = await api.tool(team["lead"], "spawn_teammate", name="three", description="d", prompt="")
    assert third.status_code == 409 and third.json()["error"]["code"] == "TEAM_ROSTER_FULL"
    assert third.json()["error"]["message"] == (
        "The team already has 2 teammates (the Lead not counted), the most it may have."
    )


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "eight"])
def test_a_limit_that_is_not_a_positive_integer_stops_the_server_at_start_up(monkeypatch, value):
    with pytest.raises(ImproperlyConfigured) as refused:
        settings_from_env(monkeypatch, STEERBOARD_MAX_MEMBERS_PER_TEAM=value, DEBUG="1")
    assert f"STEERBOARD_MAX_MEMBERS_PER_TEAM must be a positive integer (like 8), not {value!r}" in str(refused.value)


def test_a_positive_limit_is_taken(monkeypatch):
    taken = settings_from_env(monkeypatch, STEERBOARD_MAX_MEMBERS_PER_TEAM="12", DEBUG="1")
    assert taken.STEERBOARD["MAX_MEMBERS_PER_TEAM"] == 12


# --- 9. write scopes normalised, reassign hands a pending task over in progress (issue 31) -------
async def test_write_scopes_are_normalised_as_the_seed_does(api):
    team = await team_new()
    created = await api.ok(
        team["lead"], "team_task_create", subject="s", description="d", write_scopes=["src", "./src/", "src"]
    )
    assert created["task"]["write_scopes"] == ["src"]
    edited = await api.ok(
        team["lead"], "team_task_update", task_id="task-1", expected_revision=1, action="edit",
        write_scopes=["./docs/", "docs/*.md", "docs"],
    )
    assert edited["task"]["write_scopes"] == ["docs", "docs/*.md"]
    for scope in ("../src", "a/../b", "/etc", "C:\\src", "C:src", "a\\b", "a//b", "./", "."):
        refused = await api.tool(team["lead"], "team_task_create", subject="s", description="d", write_scopes=[scope])
        assert refused.status_code == 400, scope
        error = refused.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and error["message"].startswith("write_scopes.0"), error
    listed = await api.ok(team["lead"], "team_task_list")
    assert [t["id"] for t in listed["tasks"]] == ["task-1"]  # nothing refused was stored


async def test_the_leads_reassign_of_a_pending_task_hands_it_over_in_progress(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await api.ok(team["lead"], "team_task_create", subject="s", description="d")
    moved = (await api.ok(
        team["lead"], "team_task_update", task_id="task-1", expected_revision=1, action="reassign", owner="implementer"
    ))["task"]
    assert (moved["status"], moved["owner"]) == ("in_progress", "implementer")
    done = await api.ok(impl, "team_task_update", task_id="task-1", expected_revision=moved["revision"], action="complete")
    assert done["task"]["status"] == "completed"

    # An in-progress task stays in progress; a task with open blockers is still refused.
    await api.ok(team["lead"], "team_task_create", subject="blocker", description="d")
    await api.ok(team["lead"], "team_task_create", subject="blocked", description="d", blocked_by=["task-2"])
    refused = await api.tool(
        team["lead"], "team_task_update", task_id="task-3", expected_revision=1, action="reassign", owner="implementer"
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "TASK_INVALID_ACTION"
    claimed = (await api.ok(team["lead"], "team_task_update", task_id="task-2", expected_revision=1, action="claim"))["task"]
    moved = (await api.ok(
        team["lead"], "team_task_update", task_id="task-2", expected_revision=claimed["revision"], action="reassign",
        owner="implementer",
    ))["task"]
    assert (moved["status"], moved["owner"]) == ("in_progress", "implementer")


# --- 10. a queued message says how often delivery was tried and why it waits (issue 31) ----------
async def test_a_queued_message_shows_its_attempt_and_why_it_waits(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    session = Agent(impl)
    await session.connect("idle")
    await session.close()  # inactive now, and the team has no host
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="when you are back")
    assert sent["status"] == "queued" and "do not resend" in sent["delivery"]["warnings"][0]
    reason = "implementer is inactive and no host is connected to resume it"

    ops = await manage_json("operator_create", "op")
    headers = {"Authorization": f"Token {ops['token']}"}
    shown = (await api.http.get(f"/api/v1/teams/alpha/messages/{sent['message_id']}", headers=headers)).json()
    assert (shown["state"], shown["attempts"], shown["failures"], shown["last_error"]) == ("queued", 1, 0, reason)
    assert [(e["kind"], e.get("error")) for e in shown["events"]] == [("queued", None), ("failed", reason)]

    # The trace page shows the same.
    @database_sync_to_async
    def trace_page() -> str:
        from django.contrib.auth.models import User
        from django.test import Client

        client = Client()
        client.force_login(User.objects.get(username="op"))
        response = client.get(f"/teams/alpha/messages/{sent['message_id']}/")
        assert response.status_code == 200
        return response.content.decode()

    page = await trace_page()
    assert "· 1 attempt ·" in page and f'<div class="last-error" role="note">{reason}</div>' in page
    assert page.count(reason) == 3  # its last error, its failed event and the trace's last row (where it is now, and why)
