"""The dashboard while the server cannot reach its database: its socket stays up
(Redis is fine) and nothing rings, so "live" would be stale. The page says so
instead, and comes back to "live" (and re-reads) when the database is back.

A PostgreSQL cluster of its own (tests/support/services.py) that the test stops;
it runs in the PostgreSQL run of scripts/test.sh.
"""

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import operator_opens_team, screenshot, tool
from tests.support.live import postgres_run_only

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.slow,
    postgres_run_only("stops a PostgreSQL cluster of its own"),
]


def test_the_dashboard_says_when_the_server_cannot_reach_its_database(own_database, page):
    environment, server, pg = own_database
    team = environment.team_create("omega")
    operator_opens_team(page, environment, server, "omega")
    indicator = page.locator(".conn[data-connection]")  # the top bar's; <body> has one too
    expect(indicator).to_have_text("live")

    pg.stop("fast")
    expect(indicator).to_have_text("server can't reach its database", timeout=25_000)
    expect(indicator).to_have_attribute("data-connection", "no-database")
    expect(page.locator("body")).to_have_attribute("data-database", "unreachable")
    expect(page.locator("body")).to_have_attribute("data-connection", "live")  # the socket itself stayed up
    screenshot(page, "dashboard-database-unreachable")

    pg.start()
    expect(indicator).to_have_text("live", timeout=15_000)
    expect(page.locator("body")).to_have_attribute("data-database", "ok")
    # Live again for real: what happens now is on the page.
    tool(server, team["lead"]["token"], "spawn_teammate", name="after", description="d", prompt="p")
    expect(page.locator('[data-member="after"]')).to_be_visible()
    assert page.page_errors == []
