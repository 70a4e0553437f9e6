"""Each lane says what its member is doing and for how long (issue 28 item 3), in real Chromium
against the application served in-process with a short STALL_AFTER: a session played over the websocket
goes idle → working on a tool → stalled (the page reads again when it crosses the threshold,
no doorbell rings) and joins Needs attention → working again → waiting for a peer → idle."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import operator_opens_team, screenshot, team_with_coder

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_lane_shows_the_members_activity_with_its_age_and_a_stall_needs_attention(
    inproc_env, served_thread, settings, page, agents
):
    server = served_thread
    settings.STEERBOARD = {**settings.STEERBOARD, "STALL_AFTER": 3.0}
    team_with_coder(inproc_env, server, "doing")
    operator_opens_team(page, inproc_env, server, "doing")

    lane = page.locator('[data-member="coder"]')
    expect(lane.locator("[data-activity]")).to_have_attribute("data-activity", "inactive")
    coder = agents(server, inproc_env.manage_json("member_token", "doing", "coder")["token"], "idle")
    expect(lane.locator("[data-activity]")).to_have_attribute("data-activity", "idle")
    expect(lane.locator("[data-activity] time[data-activity-since]")).to_have_attribute("data-ago", "for {age}")
    # Idle with no reason is what the status pill says already: not said twice.
    expect(lane.locator("[data-status-label]")).to_have_text("idle")
    expect(lane.locator("[data-activity]")).to_be_hidden()

    coder.status("running")
    coder.entry("turn_start", turn_id="t1", step=0, cause="steer")
    coder.entry("tool_call", turn_id="t1", step=0, call_id="c1", tool="team_task_list", arguments={})
    working = lane.locator('[data-activity="working"]')
    expect(working).to_contain_text("team_task_list")
    expect(working).to_be_visible()
    expect(working.locator("time[data-activity-since]")).to_contain_text("for ")
    screenshot(page, "activity-1-working")

    # Nothing recorded for 3 s: stalled, with the last entry; and it needs attention.
    stalled = lane.locator('[data-activity="stalled"]')
    expect(stalled).to_contain_text("last entry tool_call team_task_list")
    item = page.locator('[data-attention="stalled"][data-attention-member="coder"]')
    expect(item).to_be_visible()
    expect(item.locator("[data-last-error]")).to_contain_text("last entry tool_call team_task_list")
    expect(item.locator('a[data-lane-link="coder"]')).to_be_visible()
    screenshot(page, "activity-2-stalled")

    # Its result arrives: working again, and Needs attention lets it go.
    coder.entry("tool_result", turn_id="t1", step=0, call_id="c1", tool="team_task_list", result={"tasks": []})
    expect(lane.locator('[data-activity="working"]')).to_contain_text("thinking")
    expect(item).to_have_count(0)

    coder.entry("tool_call", turn_id="t1", step=1, call_id="c2", tool="await_message",
                arguments={"sender": "lead"}, local=True)
    expect(lane.locator('[data-activity="waiting_peer"]')).to_contain_text("await_message from lead")
    screenshot(page, "activity-3-waiting")

    coder.entry("tool_result", turn_id="t1", step=1, call_id="c2", tool="await_message",
                result={"timed_out": True, "arrived": []})
    coder.entry("turn_end", turn_id="t1", step=1, reason="done")
    coder.status("idle")
    expect(lane.locator("[data-activity]")).to_have_attribute("data-activity", "idle")
    assert not page.page_errors
