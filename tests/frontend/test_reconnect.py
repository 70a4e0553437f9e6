"""The page's socket drops and comes back: the page catches up from the database."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import open_lane, operator_opens_team, screenshot, tool
from tests.support.live import DaphneProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]


def test_page_catches_up_with_what_happened_while_its_server_was_down(live_env, page, agents):
    first = back = DaphneProcess(live_env).start()
    other = DaphneProcess(live_env).start()  # same database; the team keeps working through it
    try:
        team = live_env.team_create("delta")
        lead = team["lead"]["token"]
        operator_opens_team(page, live_env, first, "delta")
        page.evaluate("window.__sameDocument = true")
        expect(page.locator('[data-member="lead"]')).to_have_attribute("data-status", "inactive")

        first.stop()
        expect(page.locator("body")).to_have_attribute("data-connection", "offline")

        # Meanwhile, through the other process: a teammate, a task, a message delivered, a turn.
        tool(other, lead, "spawn_teammate", name="tester", description="runs the tests", prompt="")
        tool(other, lead, "team_task_create", subject="Run the suite", description="The whole suite, green.")
        lead_session = agents(other, lead, "running")
        tester = agents(other, live_env.manage_json("member_token", "delta", "tester")["token"], "idle")
        sent = tool(other, lead, "send_message", target="tester", message="Run the suite now.")
        tester.recv("steer")
        tester.status("running")
        tester.entry("turn_start", turn_id="run-1", step=0)
        tester.entry(
            "user_message",
            turn_id="run-1",
            step=0,
            text="Run the suite now.",
            source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"},
        )
        screenshot(page, "reconnect-1-offline")

        back = DaphneProcess(live_env, port=first.port).start()  # the page's server is back, same port
        expect(page.locator("body")).to_have_attribute("data-connection", "live", timeout=30_000)
        expect(page.locator('[data-member="lead"]')).to_have_attribute("data-status", "running")
        tester_lane = page.locator('[data-member="tester"]')
        expect(tester_lane).to_have_attribute("data-status", "running")
        expect(tester_lane.locator(f'[data-message-id="{sent["message_id"]}"]')).to_have_attribute(
            "data-state", "delivered"
        )
        expect(tester_lane.locator("[data-current-turn]")).to_have_attribute("data-current-turn", "run-1")
        expect(page.locator('[data-task-id="task-1"]')).to_be_visible()

        assert page.evaluate("window.__sameDocument") is True
        screenshot(page, "reconnect-2-caught-up")

        # And it is live again: a change made through its own server arrives without a reload.
        open_lane(page, "tester")
        again = tool(back, lead, "send_message", target="tester", message="And the slow tests.")
        expect(tester_lane.locator(f'[data-message-id="{again["message_id"]}"]')).to_be_visible()
        assert page.evaluate("window.__sameDocument") is True
    finally:
        for server in (first, other, back):
            server.stop()
