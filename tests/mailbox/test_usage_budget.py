"""What the members' models used and cost, and the team's token budget (mailbox/members/usage.py,
mailbox/engine/budget.py; issue 27, items 3 and 4), through the real websocket and REST.

A session reports each model reply's usage on the first entry the reply produced; the
server sums it per member and model in the entry's commit (a folded repeat adds
nothing), shows it in list_agents and the operator REST with its cost from the price
table, and once the team's budget is used up starts no new turn there: messages and
prompts stay queued, durable, and say why, until an operator raises the budget, after
which everything queued is delivered in order.
"""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import HumanPrompt, LeadLogRecord, LogKind, MemberUsage, TeamMessage
from teams.models import Member
from tests.support.inproc import Agent, person, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

PRICES = {"gpt-test": {"input": 2.0, "output": 8.0, "cached": 0.5}}


@pytest.fixture(autouse=True)
def _prices(settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MODEL_PRICES": PRICES, "SWEEP_INTERVAL": 0}


def reply(entry_id: str, *, model: str = "gpt-test", input_tokens: int, output_tokens: int, cached: int = 0,
          kind: str = "assistant_text") -> dict:
    entry = {"id": entry_id, "kind": kind, "turn_id": "turn-1",
             "usage": {"model": model, "input_tokens": input_tokens, "output_tokens": output_tokens,
                       "cached_tokens": cached}}
    if kind == "assistant_text":
        entry["text"] = "thinking out loud"
    else:
        entry.update(tool="list_agents", call_id=f"call-{entry_id}", arguments={})
    return entry


async def report(agent: Agent, entry: dict) -> dict:
    await agent.send({"type": "entry", "entry": entry})
    return await agent.expect("ack")


async def test_usage_is_summed_per_member_and_model_once_per_entry_with_its_cost(api):
    team = await team_new()
    impl = Agent(await spawn(api, team["lead"], "alpha", "impl"))
    await impl.connect("running")
    lead = Agent(team["lead"])
    await lead.connect("running")

    assert (await report(impl, reply("r1", input_tokens=1000, output_tokens=200, cached=400)))["folded"] is False
    assert (await report(impl, reply("r1", input_tokens=1000, output_tokens=200, cached=400)))["folded"] is True
    await report(impl, reply("r2", input_tokens=500, output_tokens=100, kind="tool_call"))
    await report(lead, reply("l1", model="local-llama", input_tokens=50, output_tokens=5))
    # An entry without usage counts nothing.
    await report(impl, {"id": "r3", "kind": "assistant_text", "text": "no usage reported"})

    roster = await api.ok(team["lead"], "list_agents")
    impl_usage = next(a["usage"] for a in roster["agents"] if a["name"] == "impl")
    assert {k: impl_usage[k] for k in ("input_tokens", "output_tokens", "cached_tokens", "replies", "tokens")} == {
        "input_tokens": 1500, "output_tokens": 300, "cached_tokens": 400, "replies": 2, "tokens": 1800}
    # (1100 uncached x 2 + 400 cached x 0.5 + 300 out x 8) / 10^6 dollars
    assert impl_usage["cost_usd"] == pytest.approx((1100 * 2 + 400 * 0.5 + 300 * 8) / 1e6)
    lead_usage = next(a["usage"] for a in roster["agents"] if a["name"] == "lead")
    assert lead_usage["tokens"] == 55 and lead_usage["cost_usd"] is None  # a model without a price: tokens only
    assert roster["usage"]["tokens"] == 1855 and roster["usage"]["cost_usd"] is None
    assert roster["budget"] == {"tokens": None, "used": 0, "left": None, "exhausted": False, "source": "none"}
    rows = await database_sync_to_async(lambda: MemberUsage.objects.filter(member__name="impl").count())()
    assert rows == 1

    ops = await person("ops", operator=True)
    summary = (await api.http.get("/api/v1/teams/alpha", headers=ops)).json()
    assert summary["usage"] == roster["usage"]
    assert next(m for m in summary["members"] if m["name"] == "impl")["usage"] == impl_usage
    await impl.close()
    await lead.close()


async def test_usage_goes_only_on_a_model_replys_entry_and_must_add_up(api):
    team = await team_new()
    agent = Agent(team["lead"])
    await agent.connect("running")
    for entry, field in [
        ({**reply("bad-kind", input_tokens=1, output_tokens=1), "kind": "turn_start"}, "usage goes on"),
        (reply("bad-cached", input_tokens=10, output_tokens=1, cached=11), "cached_tokens"),
        ({**reply("bad-count", input_tokens=1, output_tokens=1), "usage": {"model": "m", "input_tokens": -1}},
         "input_tokens"),
        ({**reply("bad-field", input_tokens=1, output_tokens=1), "usage": {"model": "m", "dollars": 3}}, "dollars"),
    ]:
        await agent.send({"type": "entry", "entry": entry})
        refused = await agent.expect("error")
        assert refused["error"]["code"] == "VALIDATION_ERROR" and field in refused["error"]["message"], refused
    assert not await database_sync_to_async(MemberUsage.objects.exists)()
    await agent.close()


async def test_a_used_up_budget_starts_no_turn_until_an_operator_raises_it(api):
    team = await team_new()
    impl_token = await spawn(api, team["lead"], "alpha", "impl")
    await spawn(api, team["lead"], "alpha", "reviewer")  # no session: a prompt to it would ask a host
    impl = Agent(impl_token)
    await impl.connect("idle")
    viewer, ops = await person("viewer", operator=False), await person("ops", operator=True)

    refused = await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": 1000}, headers=viewer)
    assert refused.status_code == 403
    bad = await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": -5}, headers=ops)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "VALIDATION_ERROR"
    budget = (await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": 1000}, headers=ops)).json()
    assert budget == {"tokens": 1000, "used": 0, "left": 1000, "exhausted": False, "source": "team"}

    # Below the budget, a message starts a turn as usual.
    first = await api.ok(team["lead"], "send_message", target="impl", message="go")
    assert first["status"] == "accepted"
    await impl.integrate((await impl.expect("steer"))["message"])
    await impl.status("running")
    await report(impl, reply("r1", input_tokens=900, output_tokens=150))  # 1050 of 1000: used up
    await impl.status("idle")

    held = await api.ok(team["lead"], "send_message", target="impl", message="one more")
    assert held["status"] == "queued"
    assert held["delivery"]["code"] == "TEAM_BUDGET_EXHAUSTED"
    assert any(w.startswith("TEAM_BUDGET_EXHAUSTED") for w in held["delivery"]["warnings"])
    second = await api.ok(team["lead"], "send_message", target="impl", message="and another")
    assert await impl.nothing("steer")
    stored = await database_sync_to_async(lambda: TeamMessage.objects.get(pk=held["message_id"]))()
    assert stored.state == "queued" and stored.last_error.startswith("TEAM_BUDGET_EXHAUSTED")
    # The send's try is its one attempt, and its reason (written in the send's statement) is
    # admission's to the word: admission after it found nothing new to record (issue 31).
    assert stored.attempts == 1 and "used 1050 of its 1000-token budget" in stored.last_error
    assert stored.last_error == held["delivery"]["warnings"][0]
    failed = await database_sync_to_async(lambda: list(LeadLogRecord.objects.filter(
        message_id=held["message_id"], kind=LogKind.MESSAGE_FAILED).values_list("data", flat=True)))()
    assert failed == [{"target": "impl", "seq": stored.seq, "error": stored.last_error, "waiting": True}]
    prompt = await api.http.post("/api/v1/teams/alpha/prompts", json={"target": "impl", "content": "hi"}, headers=ops)
    assert prompt.status_code == 201, prompt.text
    assert await impl.nothing("prompt")
    # A reconnecting session is replayed nothing: that would start a turn.
    again = Agent(await database_sync_to_async(lambda: impl_token)())
    welcome = await again.connect("idle")
    assert welcome["replay"] == 0
    await again.close()
    impl = Agent(impl_token)
    await impl.connect("idle")
    roster = await api.ok(team["lead"], "list_agents")
    assert roster["budget"] == {"tokens": 1000, "used": 1050, "left": 0, "exhausted": True, "source": "team"}

    # Raised: what waited goes on at once, in order, then the prompt as a turn of its own.
    raised = (await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": 5000}, headers=ops)).json()
    assert raised["exhausted"] is False and raised["left"] == 3950
    steers = [(await impl.expect("steer"))["message"]["id"] for _ in range(2)]
    assert steers == [held["message_id"], second["message_id"]]
    for message_id in steers:
        await impl.integrate({"id": message_id, "content": "x", "sender": "lead"})
    await impl.status("idle")
    offered = await impl.expect("prompt")
    assert offered["prompt"]["content"] == "hi"
    prompts = await database_sync_to_async(lambda: list(HumanPrompt.objects.values_list("state", flat=True)))()
    assert prompts == ["queued"]  # offered; it starts when the session records it
    await impl.close()


async def test_the_servers_default_budget_applies_to_a_team_without_its_own(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "TEAM_TOKEN_BUDGET": 100}
    team = await team_new()
    impl = Agent(await spawn(api, team["lead"], "alpha", "impl"))
    await impl.connect("running")
    await report(impl, reply("r1", input_tokens=80, output_tokens=20))
    await impl.status("idle")
    held = await api.ok(team["lead"], "send_message", target="impl", message="over")
    assert held["status"] == "queued" and held["delivery"]["code"] == "TEAM_BUDGET_EXHAUSTED"
    roster = await api.ok(team["lead"], "list_agents")
    assert roster["budget"]["source"] == "setting" and roster["budget"]["exhausted"] is True
    # An operator's own budget for the team takes over from the default.
    ops = await person("ops", operator=True)
    await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": 10_000}, headers=ops)
    assert (await impl.expect("steer"))["message"]["id"] == held["message_id"]
    cleared = (await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": None}, headers=ops)).json()
    assert cleared["source"] == "setting" and cleared["tokens"] == 100
    member = await database_sync_to_async(lambda: Member.objects.get(name="impl"))()
    assert member.status == "idle"
    await impl.close()


async def test_the_reply_that_uses_the_budget_up_stops_the_turns_under_way_after_their_step(api):
    team = await team_new()
    impl = Agent(await spawn(api, team["lead"], "alpha", "impl"))
    await impl.connect("running")
    reviewer = Agent(await spawn(api, team["lead"], "alpha", "reviewer"))
    await reviewer.connect("running")
    idle_lead = Agent(team["lead"])
    await idle_lead.connect("idle")
    ops = await person("ops", operator=True)
    await api.http.put("/api/v1/teams/alpha/budget", json={"tokens": 1000}, headers=ops)

    await report(impl, reply("r1", input_tokens=400, output_tokens=100))  # 500 of 1000: nothing stops
    assert await impl.nothing("interrupt") and await reviewer.nothing("interrupt")
    await report(impl, reply("r2", input_tokens=450, output_tokens=100))  # 1050: used up
    # Every turn under way is interrupted (it ends after the step it is in); an idle member has none.
    await impl.expect("interrupt")
    await reviewer.expect("interrupt")
    assert await idle_lead.nothing("interrupt")
    records = await database_sync_to_async(
        lambda: list(LeadLogRecord.objects.filter(kind=LogKind.BUDGET).values_list("data", flat=True)))()
    assert {"exhausted": True, "used": 1050, "tokens": 1000, "interrupted": ["impl", "reviewer"]} in records
    for agent in (impl, reviewer, idle_lead):
        await agent.close()
