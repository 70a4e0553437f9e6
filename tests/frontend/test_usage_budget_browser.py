"""The team page shows what each member's model used and cost, the team's total and its
token budget; a used-up budget heads Needs attention, and an operator raising it on the
page gets the waiting message delivered (issue 27, items 3 and 4), in real Chromium
against the application served in-process (tests/support/inproc.py)."""
import json

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import open_lane, operator_opens_team, screenshot, team_with_coder, tool

pytestmark = [pytest.mark.browser]

PRICES = json.dumps({"gpt-test": {"input": 2, "output": 8, "cached": 0.5}})


@pytest.fixture
def priced_server(settings, monkeypatch, served_thread):
    """The server with STEERBOARD_MODEL_PRICES=PRICES, read as config/settings.py reads it."""
    from config.settings import _env_model_prices

    monkeypatch.setenv("STEERBOARD_MODEL_PRICES", PRICES)
    settings.STEERBOARD = {**settings.STEERBOARD, "MODEL_PRICES": _env_model_prices("STEERBOARD_MODEL_PRICES")}
    return served_thread


@pytest.mark.django_db(transaction=True)
def test_tokens_and_cost_per_member_and_a_budget_an_operator_raises(inproc_env, priced_server, page, agents):
    server = priced_server
    lead = team_with_coder(inproc_env, server, "spend")
    coder = agents(server, inproc_env.manage_json("member_token", "spend", "coder")["token"], "running")
    operator_opens_team(page, inproc_env, server, "spend")

    coder.entry("assistant_text", text="planning", turn_id="t1",
                usage={"model": "gpt-test", "input_tokens": 1000, "output_tokens": 200, "cached_tokens": 400})
    lane = page.locator('[data-member="coder"]')
    badge = lane.locator(".lane-head [data-tokens]")
    expect(badge).to_have_attribute("data-tokens", "1200")
    expect(badge).to_have_attribute("data-cost", str((600 * 2 + 400 * 0.5 + 200 * 8) / 1e6))
    expect(page.locator("[data-team-total]")).to_have_attribute("data-tokens", "1200")
    expect(lane.locator('[data-turn-usage="t1"]')).to_have_attribute("data-tokens", "1200")
    expect(page.locator('[data-budget="none"]')).to_be_visible()

    # A budget below what was used: the team is stopped, and the page says so first.
    page.locator('form[data-action="budget"] input[name="tokens"]').fill("1000")
    page.locator('form[data-action="budget"] button[type="submit"]').click()
    expect(page.locator("[data-budget-status]")).to_contain_text("still used up")
    coder.status("idle")
    held = tool(server, lead, "send_message", target="coder", message="one more thing")
    assert held["status"] == "queued" and held["delivery"]["code"] == "TEAM_BUDGET_EXHAUSTED"
    expect(page.locator("[data-budget-exhausted]")).to_have_attribute("data-budget-exhausted", "true")
    first = page.locator("[data-attention-list] > li").first
    expect(first).to_have_attribute("data-attention", "budget")
    open_lane(page, "coder")
    expect(lane.locator(f'[data-column="queued"] [data-message-id="{held["message_id"]}"]')).to_be_visible()
    screenshot(page, "budget-1-used-up")

    # Raised on the page: the message waiting for it is pushed and delivered.
    page.locator('form[data-action="budget"] input[name="tokens"]').fill("50000")
    page.locator('form[data-action="budget"] button[type="submit"]').click()
    steer = coder.recv("steer")
    assert steer["message"]["id"] == held["message_id"]
    coder.entry("user_message", text="one more thing",
                source={"kind": "team-message", "message_id": held["message_id"], "sender": "lead"})
    expect(lane.locator(f'[data-column="delivered"] [data-message-id="{held["message_id"]}"]')).to_be_visible()
    expect(page.locator("[data-budget-exhausted]")).to_have_attribute("data-budget-exhausted", "false")
    expect(page.locator('[data-attention="budget"]')).to_have_count(0)
    screenshot(page, "budget-2-raised")
