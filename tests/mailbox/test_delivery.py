"""mailbox/engine/delivery.py: Steer delivery to running, idle and inactive targets."""
import threading

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from mailbox.engine import delivery
from tests.support.sends import message_send
from mailbox.models import HistoryEntry, LeadLogRecord, MessageState, TeamMessage
from teams.models import SessionState
from teams.services import member_session_set, member_spawn, team_create
from tests.support.inproc import Agent, spawn, team_new, team_with_session

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def message_state(message_id: str) -> str:
    return TeamMessage.objects.get(pk=message_id).state


@database_sync_to_async
def log_kinds(message_id: str) -> list[str]:
    return list(LeadLogRecord.objects.filter(message_id=message_id).order_by("id").values_list("kind", flat=True))


async def test_running_target_is_steered_and_delivered_only_after_its_entry(api):
    team, agent = await team_with_session(api, "implementer", "running")

    sent = await api.ok(team["lead"], "send_message", target="implementer", message="look at task-1")
    assert sent["status"] == "accepted"
    steer = await agent.expect("steer")
    assert steer["message"]["id"] == sent["message_id"]
    assert steer["message"]["sender"] == "lead"
    assert steer["message"]["target"] == "implementer"
    assert await message_state(sent["message_id"]) == "accepted"

    ack = await agent.integrate(steer["message"])
    assert ack["folded"] is False
    assert await message_state(sent["message_id"]) == "delivered"
    assert await log_kinds(sent["message_id"]) == [
        "team/message/queued",
        "team/message/accepted",
        "team/message/delivered",
    ]
    await agent.close()


async def test_idle_target_gets_a_steer_that_starts_a_turn(api):
    team, agent = await team_with_session(api, "implementer", "idle")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="start please")
    assert sent["status"] == "accepted"
    steer = await agent.expect("steer")
    # An idle session starts a turn for it and says so.
    await agent.status("running")
    await agent.integrate(steer["message"])
    await agent.status("idle")
    assert await message_state(sent["message_id"]) == "delivered"
    await agent.close()


async def test_inactive_target_is_resumed_through_the_host(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    provision = await host.expect("start")
    assert provision["member"] == "implementer" and provision["reason"] == "provision"

    # The session comes up, then goes away: the member is inactive.
    first = Agent(provision["token"])
    await first.connect("idle")
    await first.close()

    sent = await api.ok(team["lead"], "send_message", target="implementer", message="wake up")
    assert sent["status"] == "accepted"
    resume = await host.expect("start")
    assert resume == {"type": "start", "member": "implementer", "token": resume["token"], "reason": "resume"}

    resumed = Agent(resume["token"])
    await resumed.connect("idle")
    steer = await resumed.expect("steer")
    assert steer["message"]["id"] == sent["message_id"]
    await resumed.integrate(steer["message"])
    assert await message_state(sent["message_id"]) == "delivered"
    await resumed.close()
    await host.close()


async def test_inactive_target_without_a_host_stays_queued_until_its_session_says_hello(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="when you are up")
    assert sent["status"] == "queued"
    assert await message_state(sent["message_id"]) == "queued"

    agent = Agent(impl)
    welcome = await agent.connect("idle")
    assert welcome["replay"] == 1
    steer = await agent.expect("steer")
    assert steer["message"]["id"] == sent["message_id"]
    await agent.integrate(steer["message"])
    assert await message_state(sent["message_id"]) == "delivered"
    await agent.close()


async def test_teammates_reach_the_lead_and_each_other_with_their_real_sender(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    research = await spawn(api, team["lead"], "alpha", "researcher")
    lead_agent, impl_agent = Agent(team["lead"]), Agent(impl)
    await lead_agent.connect("running")
    await impl_agent.connect("running")

    to_lead = await api.ok(research, "send_message", target="lead", message="task-1 done")
    to_sibling = await api.ok(research, "send_message", target="implementer", message="task-1 done, go")
    assert to_lead["status"] == to_sibling["status"] == "accepted"
    at_lead = (await lead_agent.expect("steer"))["message"]
    at_sibling = (await impl_agent.expect("steer"))["message"]
    assert (at_lead["sender"], at_lead["target"]) == ("researcher", "lead")
    assert (at_sibling["sender"], at_sibling["target"]) == ("researcher", "implementer")
    await lead_agent.integrate(at_lead)
    await impl_agent.integrate(at_sibling)
    assert await message_state(to_lead["message_id"]) == "delivered"
    assert await message_state(to_sibling["message_id"]) == "delivered"

    # A payload can never choose its sender.
    forged = await api.tool(research, "send_message", target="implementer", message="hi", sender="lead")
    assert forged.status_code == 400
    assert forged.json()["error"]["code"] == "VALIDATION_ERROR"
    assert forged.json()["persisted"] is False
    senders = await database_sync_to_async(
        lambda: sorted(TeamMessage.objects.values_list("sender__name", flat=True))
    )()
    assert senders == ["researcher", "researcher"]
    await lead_agent.close()
    await impl_agent.close()


async def test_a_repeated_entry_folds_into_one_history_entry_and_one_delivered_record(api):
    team, agent = await team_with_session(api, "implementer", "running")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="once")
    steer = (await agent.expect("steer"))["message"]
    assert (await agent.integrate(steer, entry_id="e-1"))["folded"] is False
    # The same entry again, and the same message under another entry id: both fold.
    assert (await agent.integrate(steer, entry_id="e-1"))["folded"] is True
    assert (await agent.integrate(steer, entry_id="e-2"))["folded"] is True

    counts = await database_sync_to_async(
        lambda: (
            HistoryEntry.objects.filter(message_id=sent["message_id"]).count(),
            LeadLogRecord.objects.filter(message_id=sent["message_id"], kind="team/message/delivered").count(),
        )
    )()
    assert counts == (1, 1)
    await agent.close()


async def test_a_host_that_connects_resumes_a_member_whose_session_died_mid_turn(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    researcher = await spawn(api, team["lead"], "alpha", "researcher")
    for token, name in ((impl, "implementer"), (researcher, "researcher")):
        agent = Agent(token)
        await agent.connect("running")
        await agent.send({"type": "entry", "entry": {"id": f"{name}-t1", "kind": "turn_start", "turn_id": "t1"}})
        await agent.expect("ack")
        if name == "researcher":  # this one finished its turn before going away
            await agent.send({"type": "entry", "entry": {"id": f"{name}-t1-end", "kind": "turn_end", "turn_id": "t1"}})
            await agent.expect("ack")
        await agent.close()

    host = Agent(team["host"], path="/ws/host/")
    await host.connect(status=None)
    start = await host.expect("start")
    assert (start["member"], start["reason"]) == ("implementer", "resume")
    assert await host.nothing("start")
    await host.close()


async def test_a_hello_replays_each_undelivered_message_exactly_once(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    sent = [
        (await api.ok(team["lead"], "send_message", target="implementer", message=f"m{i}"))["message_id"]
        for i in range(3)
    ]
    agent = Agent(impl)
    welcome = await agent.connect("idle")
    assert welcome["replay"] == 3
    steered = [(await agent.expect("steer"))["message"]["id"] for _ in range(3)]
    assert steered == sent
    assert await agent.nothing("steer"), "a replayed message was steered twice"
    await agent.close()


# --- many senders at once, on either backend ----------------------------------------------------
def _team(name="delivery", teammates=("worker",)):
    team, lead, _, _ = team_create(name=name)
    members = [member_spawn(lead=lead, name=n, description="d", prompt="p") for n in teammates]
    return team, lead, members


def test_concurrent_senders_to_one_target_get_dense_seqs_and_admission_in_seq_order():
    team, lead, (worker,) = _team(teammates=("worker",))
    others = [member_spawn(lead=lead, name=f"s{i}", description="d", prompt="p") for i in range(3)]
    member_session_set(member_id=worker.pk, state=SessionState.IDLE, channel="test-channel-worker")
    errors = []

    def sender(member, count):
        try:
            for i in range(count):
                message_send(sender=member, target_name="worker", content=f"{member.name} {i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sender, args=(m, 8)) for m in [lead, *others]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    messages = list(TeamMessage.objects.filter(target=worker).order_by("seq"))
    assert [m.seq for m in messages] == list(range(1, 33))
    assert {m.state for m in messages} == {MessageState.ACCEPTED}
    # Per sender, seq follows send order (each sender sends one after another).
    for member in [lead, *others]:
        mine = [m for m in messages if m.sender_id == member.pk]
        assert [m.content for m in mine] == [f"{member.name} {i}" for i in range(8)]
    # The Lead log accepted each message once, in seq order.
    accepted = list(
        LeadLogRecord.objects.filter(kind="team/message/accepted", message__target=worker)
        .order_by("id")
        .values_list("message__seq", flat=True)
    )
    assert accepted == sorted(accepted) and len(accepted) == 32


async def test_an_entries_frame_answers_each_entry_in_order_as_if_each_came_alone(api):
    """An ``entries`` frame: each entry stored or refused on its own (a malformed one refused
    in its place, the others stored), answered in order, the acks of consecutive stored
    entries in one ``acks`` frame; a team message's entry delivers it, a repeat folds."""
    team, agent = await team_with_session(api, "implementer", "running")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="look at task-1")
    steer = (await agent.expect("steer"))["message"]
    delivers = {"kind": "user_message", "text": steer["content"],
                "source": {"kind": "team-message", "message_id": steer["id"], "sender": "lead"}}
    await agent.send({"type": "entries", "entries": [
        {"id": "t-start", "kind": "turn_start"},
        {"id": "m-1", **delivers},
        {"id": "bad", "kind": "no_such_kind"},
        {"id": "m-1-again", **delivers},  # the message is in the history already: folded
        {"id": "t-start", "kind": "turn_start"},  # the same entry id again: folded
    ]})
    first, refusal, second = [await agent.comm.receive_json_from(timeout=5) for _ in range(3)]
    assert first == {"type": "acks", "acks": [{"entry_id": "t-start", "folded": False},
                                              {"entry_id": "m-1", "folded": False}]}
    assert refusal["type"] == "error" and refusal["error"]["code"] == "VALIDATION_ERROR"
    assert refusal["entry_id"] == "bad" and "kind" in refusal["error"]["message"]
    assert second == {"type": "acks", "acks": [{"entry_id": "m-1-again", "folded": True},
                                               {"entry_id": "t-start", "folded": True}]}
    assert await message_state(sent["message_id"]) == "delivered"

    @database_sync_to_async
    def history() -> list[str]:
        return list(HistoryEntry.objects.filter(member__name="implementer", member__team__name="alpha")
                    .order_by("id").values_list("entry_id", flat=True))

    assert await history() == ["t-start", "m-1"]
    # More entries than one request may carry: refused whole, nothing stored.
    from django.conf import settings

    many = settings.STEERBOARD["MAX_ENTRIES_PER_REQUEST"] + 1
    await agent.send({"type": "entries", "entries": [{"id": f"x-{i}", "kind": "assistant_text"} for i in range(many)]})
    refused = await agent.expect("error")
    assert refused["error"]["code"] == "TOO_MANY_ENTRIES"
    assert await history() == ["t-start", "m-1"]
    await agent.close()


@database_sync_to_async
def history_of(member: str, team: str = "alpha") -> list[str]:
    return list(HistoryEntry.objects.filter(member__name=member, member__team__name=team)
                .order_by("id").values_list("entry_id", flat=True))


async def test_a_tool_frame_carries_the_entries_its_call_comes_after(api):
    """A ``tool`` frame with ``entries`` (the welcome names ``tool_entries``): they are stored as
    an entries frame just before it would store them, the call runs once they are, and their
    last acks come in its ``tool_result``; a refused entry among them is answered in its place
    and stops neither the others nor the call."""
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    agent = Agent(impl)
    welcome = await agent.connect("running")
    assert {"tool_entries", "entries_status"} <= set(welcome["features"])
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="look at task-1")
    steer = (await agent.expect("steer"))["message"]
    await agent.send({"type": "tool", "id": "call-1", "name": "send_message",
                      "arguments": {"target": "lead", "message": "on it", "idempotency_key": "k-1"},
                      "entries": [
                          {"id": "t-start", "kind": "turn_start"},
                          {"id": "m-1", "kind": "user_message", "text": steer["content"],
                           "source": {"kind": "team-message", "message_id": steer["id"], "sender": "lead"}},
                          {"id": "c-1", "kind": "tool_call", "tool": "send_message"},
                      ]})
    answer = await agent.expect("tool_result")
    assert answer["id"] == "call-1" and answer["result"]["status"] in ("accepted", "delivered", "queued"), answer
    assert answer["acks"] == [{"entry_id": "t-start", "folded": False}, {"entry_id": "m-1", "folded": False},
                              {"entry_id": "c-1", "folded": False}]
    assert await message_state(sent["message_id"]) == "delivered"
    assert await history_of("implementer") == ["t-start", "m-1", "c-1"]

    # A refused entry last: answered in its place, then the call's result (no acks left to carry).
    await agent.send({"type": "tool", "id": "call-2", "name": "list_agents", "arguments": {},
                      "entries": [{"id": "r-1", "kind": "tool_result", "tool": "send_message"},
                                  {"id": "bad", "kind": "no_such_kind"}]})
    acks, refusal, answer = [await agent.comm.receive_json_from(timeout=5) for _ in range(3)]
    assert acks == {"type": "acks", "acks": [{"entry_id": "r-1", "folded": False}]}
    assert refusal["type"] == "error" and refusal["entry_id"] == "bad"
    assert answer["type"] == "tool_result" and answer["id"] == "call-2" and "result" in answer and "acks" not in answer
    assert await history_of("implementer") == ["t-start", "m-1", "c-1", "r-1"]
    await agent.close()


async def test_an_entries_frame_may_carry_the_status_after_them(api):
    """``entries`` with ``status`` (the welcome names ``entries_status``): the status is set
    as a ``status`` frame right after them would set it, once they are stored."""
    _, agent = await team_with_session(api, "implementer", "running")
    await agent.send({"type": "entries", "status": "idle", "entries": [
        {"id": "t-start", "kind": "turn_start"}, {"id": "t-end", "kind": "turn_end"}]})
    assert (await agent.expect("acks"))["acks"] == [{"entry_id": "t-start", "folded": False},
                                                    {"entry_id": "t-end", "folded": False}]
    await agent.settled()

    @database_sync_to_async
    def status() -> str:
        from teams.models import Member

        return Member.objects.get(name="implementer", team__name="alpha").session_state

    assert await status() == SessionState.IDLE
    assert await history_of("implementer") == ["t-start", "t-end"]
    await agent.close()
