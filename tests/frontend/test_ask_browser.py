"""An agent asks a person (ask_human, issue 28 items 1-2) and an operator answers from the team
page, in real Chromium against a real daphne: the ask heads Needs attention within a second of
being asked (the dashboard's websocket ring), with one button per option and a free-text form;
the lane shows it; a click on an option sends the answer, which reaches the agent's session over
its websocket as a steer naming the ask and the decision; the entry that records it shows in the
member's timeline, and a viewer sees the ask but no buttons."""
import time

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, operator_opens_team, screenshot, team_with_coder, tool

pytestmark = [pytest.mark.browser]


@pytest.mark.django_db(transaction=True)
def test_an_operator_clicks_an_option_and_the_answer_reaches_the_asking_agent(
    inproc_env, served_thread, page, agents, browser
):
    server = served_thread
    team_with_coder(inproc_env, server, "asking")
    coder_token = inproc_env.manage_json("member_token", "asking", "coder")["token"]
    coder = agents(server, coder_token, "running")
    operator_opens_team(page, inproc_env, server, "asking")
    expect(page.locator('[data-attention-panel]')).to_be_visible()

    asked_at = time.monotonic()
    asked = tool(server, coder_token, "ask_human", question="Deploy to production now?", kind="approval",
                 context="The **migration** takes ten minutes.")
    assert asked["state"] == "pending"
    item = page.locator(f'[data-attention="ask"][data-ask-id="{asked["ask_id"]}"]')
    expect(item).to_be_visible(timeout=5_000)
    shown_after = time.monotonic() - asked_at
    assert shown_after < 3, shown_after  # the ring, not a poll (a second, with room for a loaded machine)
    expect(item).to_contain_text("Deploy to production now?")
    expect(item.locator('button[data-action="answer"]')).to_have_count(2)
    expect(item.locator('button[data-action="answer"][data-decision="approve"]')).to_be_visible()
    expect(item.locator('form[data-action="answer"]')).to_be_visible()
    # Asks head the list.
    expect(page.locator("[data-attention-list] > li").first).to_have_attribute("data-attention", "ask")
    lane = page.locator('[data-member="coder"]')
    expect(lane.locator(f'[data-lane-ask][data-ask-id="{asked["ask_id"]}"]')).to_contain_text("Deploy")
    screenshot(page, "ask-1-attention")

    # A viewer sees the ask, and nothing to answer it with.
    inproc_env.operator_create("watcher", viewer=True)
    viewer_context = browser.new_context(viewport={"width": 1400, "height": 1000})
    viewer = viewer_context.new_page()
    login(viewer, server, "watcher", "pw-watcher")
    open_team(viewer, server, "asking")
    seen = viewer.locator(f'[data-attention="ask"][data-ask-id="{asked["ask_id"]}"]')
    expect(seen).to_contain_text("Deploy to production now?")
    expect(seen.locator('[data-action="answer"]')).to_have_count(0)
    viewer_context.close()

    item.locator('button[data-action="answer"][data-decision="deny"]').click()
    steer = coder.recv("steer", where=lambda f: f["message"].get("ask_id") == asked["ask_id"])["message"]
    assert (steer["kind"], steer["decision"], steer["answered_by"]) == ("human_answer", "deny", "op")
    expect(item).to_have_count(0)
    expect(lane.locator("[data-lane-ask]")).to_have_count(0)

    # The session records it as the SDK does; the timeline shows the answer.
    coder.entry("user_message", text=steer["content"], source={
        "kind": "human-answer", "message_id": steer["id"], "ask_id": asked["ask_id"], "decision": "deny",
        "answered_by": "op"})
    open_lane(page, "coder")
    lane.locator('[data-timeline="coder"] > summary').click()
    answer_entry = lane.locator(f'[data-entry-ask-id="{asked["ask_id"]}"]')
    expect(answer_entry).to_have_attribute("data-entry-decision", "deny")
    expect(answer_entry).to_contain_text("answer to ask")
    screenshot(page, "ask-2-answered")

    # The answer's trace starts with the ask it answers.
    page.goto(f"{server.url}/teams/asking/messages/{steer['id']}/")
    expect(page.locator('[data-event="answered"]')).to_contain_text("op")
    expect(page.locator('[data-event="delivered"]')).to_be_visible()
