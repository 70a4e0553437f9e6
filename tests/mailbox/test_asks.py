"""ask_human and its answer (mailbox/members/asks.py; issue 28 items 1-2): the ask is durable (a row and a
Lead-log record) before the tool answers; an operator's answer comes back to the asker as a team
message steered through the writer's send job (running, or cold-resumed through its host), whose
steer names the ask, the decision and who answered; the first answer wins (409 ASK_NOT_PENDING),
also against the expiry; viewers cannot answer."""
import asyncio

import pytest
from channels.db import database_sync_to_async

from mailbox.members import asks
from mailbox.models import HistoryEntry, HumanAsk, LeadLogRecord, TeamMessage
from mailbox.operations import recovery
from tests.support.inproc import Agent, person, spawn, team_new, team_with_session

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def ask_row(ask_id: str) -> HumanAsk:
    return HumanAsk.objects.select_related("member", "answer_message").get(pk=ask_id)


@database_sync_to_async
def records(kind: str) -> list[dict]:
    return [r.data | {"message_id": r.message_id} for r in LeadLogRecord.objects.filter(kind=kind).order_by("id")]


async def answer(api, headers, ask_id: str, **body):
    return await api.http.post(f"/api/v1/teams/alpha/asks/{ask_id}/answer", json=body, headers=headers)


async def ask(api, token: str, **arguments) -> str:
    result = await api.ok(token, "ask_human", **arguments)
    assert result["state"] == "pending"
    return result["ask_id"]


async def test_an_ask_is_a_row_and_a_lead_log_record_before_the_tool_answers(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    ask_id = await ask(api, impl, question="May I drop the table?", kind="approval", context="**prod**",
                       expires_in_s=600)
    row = await ask_row(ask_id)
    assert (row.member.name, row.kind, row.options, row.state, row.context) == (
        "impl", "approval", ["approve", "deny"], "pending", "**prod**")
    assert row.expires_at is not None
    [asked] = await records("team/ask/asked")
    assert asked["ask_id"] == ask_id and asked["member"] == "impl" and asked["question"] == "May I drop the table?"

    viewer = await person("viewer", False)
    listed = (await api.http.get("/api/v1/teams/alpha/asks?state=pending", headers=viewer)).json()
    assert [a["id"] for a in listed["asks"]] == [ask_id]
    assert listed["asks"][0]["options"] == ["approve", "deny"]
    assert (await api.http.get("/api/v1/teams/alpha/asks?state=answered", headers=viewer)).json()["asks"] == []
    assert (await api.http.get("/api/v1/teams/alpha/asks?state=nope", headers=viewer)).status_code == 400


@pytest.mark.parametrize("arguments", [
    {"question": " "},
    {"question": "x" * 4001},
    {"question": "q", "kind": "vote"},
    {"question": "q", "options": []},
    {"question": "q", "options": [str(i) for i in range(9)]},
    {"question": "q", "options": ["a", "a"]},
    {"question": "q", "options": ["x" * 65]},
    {"question": "q", "context": "x" * 65537},
    {"question": "q", "expires_in_s": 59},
    {"question": "q", "expires_in_s": 604801},
    {"question": "q", "sender": "lead"},
])
async def test_bad_arguments_are_refused_and_store_nothing(api, arguments):
    team = await team_new()
    response = await api.tool(team["lead"], "ask_human", **arguments)
    assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR", response.text
    assert not await database_sync_to_async(HumanAsk.objects.exists)()


async def test_a_member_has_at_most_so_many_asks_waiting(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_ASKS_PER_MEMBER": 2}
    team = await team_new()
    await ask(api, team["lead"], question="one")
    await ask(api, team["lead"], question="two")
    refused = await api.tool(team["lead"], "ask_human", question="three")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "TOO_MANY_ASKS"


async def test_the_answer_steers_a_running_asker_once_and_a_second_answer_is_409(api):
    _, impl = await team_with_session(api, "impl", "running")
    ops, other, viewer = await person("ops", True), await person("other", True), await person("viewer", False)
    ask_id = await ask(api, await _token(impl), question="Ship it?", options=["ship", "wait"])

    assert (await answer(api, viewer, ask_id, decision="ship")).status_code == 403
    bad = await answer(api, ops, ask_id, decision="approve")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "ASK_INVALID_DECISION"
    empty = await answer(api, ops, ask_id)
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "VALIDATION_ERROR"
    assert (await ask_row(ask_id)).state == "pending"

    won = await answer(api, ops, ask_id, decision="ship", comment="go ahead")
    assert won.status_code == 200, won.text
    assert won.json()["ask"]["state"] == "answered" and won.json()["ask"]["answered_by"] == "ops"
    steer = (await impl.expect("steer"))["message"]
    assert steer["kind"] == "human_answer" and steer["target"] == "impl"
    assert (steer["ask_id"], steer["decision"], steer["answered_by"]) == (ask_id, "ship", "ops")
    assert "Ship it?" in steer["content"] and "go ahead" in steer["content"]

    late = await answer(api, other, ask_id, decision="wait")
    assert late.status_code == 409 and late.json()["error"]["code"] == "ASK_NOT_PENDING"
    assert (await ask_row(ask_id)).decision == "ship"

    # The SDK records it with the human-answer source; that entry delivers it.
    entry = {
        "id": "answer-entry", "kind": "user_message", "text": steer["content"],
        "source": {"kind": "human-answer", "message_id": steer["id"], "ask_id": ask_id, "decision": "ship",
                   "answered_by": "ops"},
    }
    await impl.send({"type": "entry", "entry": entry})
    assert (await impl.expect("ack"))["folded"] is False
    message = await database_sync_to_async(TeamMessage.objects.get)(pk=steer["id"])
    assert message.state == "delivered"
    stored = await database_sync_to_async(HistoryEntry.objects.get)(message_id=steer["id"])
    assert stored.data["source"]["kind"] == "human-answer" and stored.data["source"]["ask_id"] == ask_id

    [answered] = await records("team/ask/answered")
    assert answered["message_id"] == steer["id"] and answered["answered_by"] == "ops"
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{steer['id']}", headers=viewer)).json()
    assert [e["kind"] for e in trace["events"]] == ["answered", "queued", "accepted", "delivered"]
    assert trace["events"][0]["question"] == "Ship it?" and trace["events"][0]["decision"] == "ship"
    assert await impl.nothing("steer")
    await impl.close()


async def _token(agent: Agent) -> str:
    return dict(agent.comm.scope["headers"])[b"authorization"].decode().removeprefix("Bearer ")


async def test_an_inactive_asker_is_resumed_by_its_host_and_replayed_the_answer(api):
    team = await team_new()
    impl_token = await spawn(api, team["lead"], "alpha", "impl")
    ops = await person("ops", True)
    ask_id = await ask(api, impl_token, question="Which region?")
    host = Agent(team["host"], path="/ws/host/")
    await host.connect(None)
    assert (await answer(api, ops, ask_id, answer="eu-west")).status_code == 200
    start = await host.expect("start")
    assert start["member"] == "impl"
    impl = Agent(start["token"])
    welcome = await impl.connect("idle")
    assert welcome["replay"] == 1
    steer = (await impl.expect("steer"))["message"]
    assert (steer["kind"], steer["ask_id"], steer["decision"], steer["answer"], steer["answered_by"]) == (
        "human_answer", ask_id, None, "eu-west", "ops")
    await impl.close()
    await host.close()


@pytest.mark.parametrize("round_", range(6))
async def test_two_operators_answering_at_once_exactly_one_wins(api, round_):
    _, impl = await team_with_session(api, "impl", "idle")
    first, second = await person("first", True), await person("second", True)
    ask_id = await ask(api, await _token(impl), question="A or B?", options=["a", "b"])
    answers = await asyncio.gather(answer(api, first, ask_id, decision="a"), answer(api, second, ask_id, decision="b"))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200, 409], [r.text for r in answers]
    winner = next(r for r in answers if r.status_code == 200).json()["ask"]
    steers = [(await impl.expect("steer"))["message"]]
    assert await impl.nothing("steer")
    assert steers[0]["decision"] == winner["decision"] and steers[0]["answered_by"] == winner["answered_by"]
    count = await database_sync_to_async(TeamMessage.objects.filter(kind="human_answer").count)()
    assert count == 1
    await impl.close()


@database_sync_to_async
def _deadline_passed(ask_id: str) -> None:
    from datetime import timedelta

    from django.utils import timezone

    HumanAsk.objects.filter(pk=ask_id).update(expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.parametrize("round_", range(6))
async def test_an_answer_racing_the_expiry_lets_exactly_one_win(api, round_):
    _, impl = await team_with_session(api, "impl", "idle")
    ops = await person("ops", True)
    ask_id = await ask(api, await _token(impl), question="Now?", kind="approval", expires_in_s=60)
    await _deadline_passed(ask_id)
    response, expired = await asyncio.gather(
        answer(api, ops, ask_id, decision="approve"), database_sync_to_async(asks.asks_expire)()
    )
    # Past its deadline the ask is the expiry's, whichever runs first.
    assert response.status_code == 409 and response.json()["error"]["code"] == "ASK_NOT_PENDING"
    row = await ask_row(ask_id)
    assert (row.state, row.decision, row.answered_by) == ("expired", "expired", "")
    steer = (await impl.expect("steer"))["message"]
    assert (steer["ask_id"], steer["decision"], steer["answered_by"]) == (ask_id, "expired", None)
    assert await impl.nothing("steer")
    assert await database_sync_to_async(TeamMessage.objects.filter(kind="human_answer").count)() == 1
    assert len(await records("team/ask/expired")) == 1
    await impl.close()


@pytest.mark.parametrize("round_", range(6))
async def test_an_answer_just_before_the_deadline_races_the_sweeper_and_one_wins(api, round_):
    _, impl = await team_with_session(api, "impl", "idle")
    ops = await person("ops", True)
    ask_id = await ask(api, await _token(impl), question="Now?", kind="approval", expires_in_s=60)
    sweep = database_sync_to_async(recovery.recovery_pass)

    async def expire_then_sweep():
        await _deadline_passed(ask_id)
        return await sweep()

    response, _ = await asyncio.gather(answer(api, ops, ask_id, decision="deny"), expire_then_sweep())
    row = await ask_row(ask_id)
    if response.status_code == 200:
        assert (row.state, row.decision) == ("answered", "deny")
    else:
        assert response.status_code == 409 and (row.state, row.decision) == ("expired", "expired")
    steer = (await impl.expect("steer"))["message"]
    assert steer["decision"] == row.decision and await impl.nothing("steer")
    assert await database_sync_to_async(TeamMessage.objects.filter(kind="human_answer").count)() == 1
    await impl.close()


async def test_an_ask_of_another_team_is_not_found(api):
    team = await team_new()
    await team_new("beta")
    ops = await person("ops", True)
    ask_id = await ask(api, team["lead"], question="mine")
    response = await api.http.post(f"/api/v1/teams/beta/asks/{ask_id}/answer", json={"answer": "x"}, headers=ops)
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"


async def test_the_openapi_document_and_the_tool_list_have_ask_human_and_the_asks_endpoints(api):
    viewer = await person("viewer", False)
    tools = (await api.http.get("/api/v1/tools")).json()
    [tool] = [t for t in tools if t["name"] == "ask_human"]
    assert set(tool["input_schema"]["properties"]) == {"question", "kind", "options", "context", "expires_in_s"}
    schema = (await api.http.get("/api/schema/?format=json", headers=viewer)).json()
    assert "/api/v1/tools/ask_human" in schema["paths"]
    assert "/api/v1/teams/{team}/asks" in schema["paths"]
    assert "post" in schema["paths"]["/api/v1/teams/{team}/asks/{ask_id}/answer"]


async def test_a_session_asks_with_a_tool_frame_on_its_own_websocket(api):
    _, impl = await team_with_session(api, "impl", "running")
    await impl.send({"type": "tool", "id": "ask-1", "name": "ask_human",
                     "arguments": {"question": "Which port?", "options": ["80", "443"]}})
    result = await impl.expect("tool_result")
    assert result["id"] == "ask-1" and result["result"]["state"] == "pending"
    assert (await ask_row(result["result"]["ask_id"])).options == ["80", "443"]
    await impl.send({"type": "tool", "id": "ask-2", "name": "ask_human", "arguments": {"question": ""}})
    refused = await impl.expect("tool_result")
    assert refused["id"] == "ask-2" and refused["error"]["code"] == "VALIDATION_ERROR"
    await impl.close()


async def test_a_polling_session_reads_the_answer_with_its_ask_and_reporting_it_delivers_it(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    ops = await person("ops", True)
    ask_id = await ask(api, impl, question="Tabs or spaces?", options=["tabs", "spaces"])
    assert (await answer(api, ops, ask_id, decision="spaces")).status_code == 200
    headers = {"Authorization": f"Bearer {impl}"}
    [message] = (await api.http.get("/api/v1/inbox", headers=headers)).json()["messages"]
    assert (message["kind"], message["ask_id"], message["decision"], message["answered_by"]) == (
        "human_answer", ask_id, "spaces", "ops")
    entry = {"id": "polled-answer", "kind": "user_message", "text": message["content"],
             "source": {"kind": "human-answer", "message_id": message["id"], "ask_id": ask_id}}
    acked = await api.http.post("/api/v1/session/entries", json={"entry": entry}, headers=headers)
    assert acked.status_code == 200 and acked.json()["acks"] == [{"entry_id": "polled-answer", "folded": False}]
    assert (await database_sync_to_async(TeamMessage.objects.get)(pk=message["id"])).state == "delivered"


async def test_an_mcp_inbox_read_records_the_answer_with_the_human_answer_source(api):
    from mailbox.members import inbox
    from teams.models import Member

    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    ops = await person("ops", True)
    member = await database_sync_to_async(Member.objects.get)(team__name="alpha", name="impl")
    ask_id = (await database_sync_to_async(asks.ask_create)(member=member, question="Now?", options=[])).id
    assert (await answer(api, ops, ask_id, answer="later")).status_code == 200
    page = await inbox.inbox_take(member=member, after_seq=0, limit=10)
    assert [m["state"] for m in page["messages"]] == ["delivered"]
    stored = await database_sync_to_async(HistoryEntry.objects.get)(member=member)
    assert (stored.data["source"]["kind"], stored.data["source"]["ask_id"]) == ("human-answer", ask_id)
    assert stored.data["source"]["answered_by"] == "ops"


async def test_a_retired_askers_pending_asks_end_at_the_next_sweep_and_leave_needs_attention(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "impl")
    ops = await person("ops", True)
    ask_id = await ask(api, impl, question="Still there?")
    retired = await api.http.post("/api/v1/teams/alpha/members/impl/retire", headers=ops)
    assert retired.status_code == 200, retired.text
    await database_sync_to_async(recovery.recovery_pass)()
    row = await ask_row(ask_id)
    assert (row.state, row.decision, row.answer_message_id) == ("expired", "expired", None)
    assert (await answer(api, ops, ask_id, answer="yes")).status_code == 409
    snapshot = (await api.http.get("/teams/alpha/snapshot.json", headers=ops)).json()
    assert [i for i in snapshot["attention"]["items"] if i["kind"] == "ask"] == []
