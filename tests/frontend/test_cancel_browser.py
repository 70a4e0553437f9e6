"""An operator cancels a waiting message from the team page (issue 28 item 4), in real Chromium
against a real daphne: the card's cancel button takes it out of the queue, the lane counts it
as cancelled, its trace ends on the cancel, and the session that connects later never gets it."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import open_lane, operator_opens_team, screenshot, team_with_coder, tool

pytestmark = [pytest.mark.browser]


@pytest.mark.django_db(transaction=True)
def test_an_operator_cancels_a_waiting_message_and_it_never_reaches_its_target(inproc_env, served_thread, page, agents):
    server = served_thread
    lead = team_with_coder(inproc_env, server, "undo")
    keep = tool(server, lead, "send_message", target="coder", message="Build the parser.")
    drop = tool(server, lead, "send_message", target="coder", message="Delete the repository.")
    assert keep["status"] == drop["status"] == "queued"  # nobody runs coder yet
    operator_opens_team(page, inproc_env, server, "undo")

    lane = page.locator('[data-member="coder"]')
    open_lane(page, "coder")  # its roster row opens to its message columns
    card = lane.locator(f'[data-message-id="{drop["message_id"]}"]')
    expect(card).to_have_attribute("data-state", "queued")
    card.locator('[data-action="cancel"]').click()
    expect(card).to_have_count(0)
    expect(lane.locator('[data-count="cancelled"]')).to_contain_text("1 cancelled")
    expect(lane.locator(f'[data-message-id="{keep["message_id"]}"]')).to_have_attribute("data-state", "queued")
    screenshot(page, "cancel-1-lane")

    # coder's session connects: only the message that was not cancelled is replayed.
    coder = agents(server, inproc_env.manage_json("member_token", "undo", "coder")["token"], "idle")
    assert coder.welcome["replay"] == 1
    assert coder.recv("steer")["message"]["id"] == keep["message_id"]

    page.goto(f"{server.url}/teams/undo/messages/{drop['message_id']}/")
    expect(page.locator('[data-event="cancelled"]')).to_be_visible()
    expect(page.locator('[data-event="cancelled"]')).to_contain_text("op")
    screenshot(page, "cancel-2-trace")
