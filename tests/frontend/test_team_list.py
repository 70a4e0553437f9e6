"""The team list: a card per team whose summary follows the team live."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, screenshot, tool

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_team_list_summaries_follow_statuses_and_messages_live(live_env, daphne_server, page, agents):
    server = daphne_server
    team = live_env.team_create("epsilon")
    live_env.team_create("zeta")
    lead = team["lead"]["token"]
    live_env.operator_create("viewer", viewer=True)
    tool(server, lead, "spawn_teammate", name="implementer", description="d", prompt="")
    login(page, server, "viewer", "pw-viewer")
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    card = page.locator('[data-team="epsilon"]')
    expect(page.locator("[data-team]")).to_have_count(2)
    expect(card.locator('[data-member="lead"]')).to_have_attribute("data-status", "inactive")

    agents(server, lead, "running")
    expect(card.locator('[data-member="lead"]')).to_have_attribute("data-status", "running")
    tool(server, lead, "send_message", target="implementer", message="hello")
    expect(card.locator(".q")).to_have_text("1 queued")
    screenshot(page, "team-list")

    card.click()
    page.wait_for_url(f"{server.url}/teams/epsilon/")
    expect(page.locator('[data-member="implementer"] [data-message-id]')).to_have_attribute("data-state", "queued")
