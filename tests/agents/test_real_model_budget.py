"""A team on a vendor's API (the local fake, through the vendor's own SDK) that spends its token
budget: what its replies used is summed and priced per member and for the team, the reply that
uses the budget up stops the team (the turn under way ends after its step, the message it sent
waits, saying why, no new turn starts), and an operator who raises the budget gets the team going
again: the waiting message is delivered and its turn runs (issue 27, items 3 and 4). The host runs
in this process (tests/agents/support.py ``vendor_host``), against the application served in-process."""
import asyncio
import json

import pytest

from config.settings import _env_model_prices
from tests.agents.support import Team, vendor_host
from tests.support.fake_models import FakeVendor, Reply, Tokens

pytestmark = pytest.mark.django_db(transaction=True)

LEAD, WORKER = "fake-lead", "fake-worker"
PRICES = {LEAD: {"input": 1.0, "output": 4.0, "cached": 0.25}, WORKER: {"input": 0.5, "output": 2.0}}
ASK = "Tell me when you are ready."
REPORT = "Ready."


@pytest.fixture(params=["openai", "anthropic"])
def fake(request):
    vendor = FakeVendor(request.param).start()
    yield vendor
    vendor.stop()


@pytest.fixture
def priced(settings, monkeypatch):
    """The server with STEERBOARD_MODEL_PRICES=PRICES, read as config/settings.py reads it."""
    monkeypatch.setenv("STEERBOARD_MODEL_PRICES", json.dumps(PRICES))
    settings.STEERBOARD = {**settings.STEERBOARD, "MODEL_PRICES": _env_model_prices("STEERBOARD_MODEL_PRICES")}


def _ends(entries: list[dict]) -> list[str]:
    return [e["reason"] for e in entries if e["kind"] == "turn_end"]


async def test_a_used_up_budget_stops_a_real_model_team_and_an_operator_restarts_it(inproc_env, priced, served, fake):
    team = Team(inproc_env, served, f"spend-{fake.vendor}")
    budget = await asyncio.to_thread(team.op, "PUT", f"/teams/{team.name}/budget", json={"tokens": 1500})
    assert budget.status_code == 200
    fake.script(LEAD,
                # 1200 + 80 = 1280 of 1500: the Lead's turn goes on, ends.
                Reply(text="Bringing in a worker.", tokens=Tokens(input=1200, output=80, cached=1000), calls=[
                    ("spawn_teammate", {"name": "worker", "description": "reports", "prompt": ""}),
                    ("send_message", {"target": "worker", "message": ASK})]),
                Reply(text="Waiting for the worker.", tokens=Tokens(input=100, output=10)),
                # After the operator raised the budget: the worker's report starts this turn.
                Reply(text="The worker is ready.", tokens=Tokens(input=300, output=5)))
    # 900 + 40 takes the team to 2330 of 1500: used up. Its report waits, its turn stops after the step.
    fake.script(WORKER,
                Reply(text="Reporting.", tokens=Tokens(input=900, output=40),
                      calls=[("send_message", {"target": "lead", "message": REPORT})]),
                Reply(text="Done.", tokens=Tokens(input=950, output=5)))
    async with vendor_host(team, fake, LEAD, WORKER):
        await asyncio.to_thread(_spend_and_raise, team, fake)


def _spend_and_raise(team: Team, fake: FakeVendor) -> None:
    """What the operator sees and does, from a thread: the served application runs on the test's loop."""
    team.prompt("lead", "Get the worker ready.")
    team.wait_for(lambda: _ends(team.history("lead")) == ["done"], "the Lead's first turn", timeout=120)
    team.wait_for(lambda: team.summary()["budget"]["exhausted"], "the budget used up", timeout=60)
    team.wait_for(lambda: any(m["content"] == REPORT for m in team.messages()), "the worker's report stored",
                  timeout=60)
    team.wait_for(lambda: _ends(team.history("worker")), "the worker's turn to end", timeout=60)

    summary = team.summary()
    assert summary["budget"] == {"tokens": 1500, "used": 2330, "left": 0, "exhausted": True, "source": "team"}
    [report] = [m for m in team.messages() if m["content"] == REPORT]
    assert report["state"] == "queued" and report["last_error"].startswith("TEAM_BUDGET_EXHAUSTED")
    assert len(fake.requests_of(LEAD)) == 2, "no new turn started for the Lead"
    assert len(fake.requests_of(WORKER)) <= 2
    usage = {m["name"]: m["usage"] for m in summary["members"]}
    assert usage["lead"]["tokens"] == 1390 and usage["worker"]["tokens"] >= 940
    # Its two replies: 200 uncached + 1000 cached input and 80 output, then 100 input and 10 output.
    assert usage["lead"]["cost_usd"] == pytest.approx((200 * 1.0 + 1000 * 0.25 + 80 * 4.0 + 100 * 1.0 + 10 * 4.0) / 1e6)
    assert usage["worker"]["models"][0]["model"] == WORKER
    assert summary["usage"]["tokens"] == usage["lead"]["tokens"] + usage["worker"]["tokens"]

    # An operator raises it: the report is delivered and the Lead's turn for it runs.
    raised = team.op("PUT", f"/teams/{team.name}/budget", json={"tokens": 100_000}).json()
    assert raised["exhausted"] is False
    team.wait_for(lambda: _ends(team.history("lead")) == ["done", "done"], "the Lead's turn for the report",
                  timeout=90)
    [report] = [m for m in team.messages() if m["content"] == REPORT]
    assert report["state"] == "delivered"
    assert [e["text"] for e in team.history("lead") if e["kind"] == "assistant_text"][-1] == "The worker is ready."
    assert len(fake.requests_of(LEAD)) == 3
