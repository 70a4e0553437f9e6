"""The team list: a card per team whose summary follows the team live (served in-process),
and teams other processes make appear on it (a daphne of its own, which `manage.py
team_create`'s process shares no channel layer with on the embedded default)."""
import re

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, screenshot, tool

pytestmark = [pytest.mark.browser]


@pytest.mark.django_db(transaction=True)
def test_team_list_summaries_follow_statuses_and_messages_live(inproc_env, served_thread, page, agents):
    server = served_thread
    team = inproc_env.team_create("epsilon")
    inproc_env.team_create("zeta")
    lead = team["lead"]["token"]
    inproc_env.operator_create("viewer", viewer=True)
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


@pytest.mark.e2e  # a daphne of its own, and manage.py's process beside it
def test_a_team_made_by_manage_py_team_create_appears_on_an_open_team_list(live_env, daphne_server, page):
    server = daphne_server
    live_env.team_create("first")
    live_env.operator_create("viewer", viewer=True)
    login(page, server, "viewer", "pw-viewer")
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("[data-team]")).to_have_count(1)
    created = page.locator('[data-team="first"] time[data-ago]')
    expect(created).to_have_text(re.compile(r"^created (\d+ s ago|just now)$"))

    live_env.team_create("second")  # another process, no channel layer in common on the embedded default
    expect(page.locator('[data-team="second"]')).to_be_visible(timeout=10_000)
    # ... and that team's changes arrive live too (its dashboard group was joined).
    tool(server, _lead(live_env, "second"), "spawn_teammate", name="helper", description="d", prompt="")
    expect(page.locator('[data-team="second"] [data-member="helper"]')).to_be_visible(timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True


def _lead(live_env, team: str) -> str:
    return live_env.manage_json("member_token", team, "lead")["token"]
