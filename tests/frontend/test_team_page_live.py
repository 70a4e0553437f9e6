"""The team page follows a team live: message states, member statuses, turns, the task board."""
import json
import time

import pytest
from playwright.sync_api import expect
from websockets.exceptions import InvalidStatus

from tests.frontend.conftest import login, open_lane, open_team, screenshot, tool, ws_open

pytestmark = [pytest.mark.browser]



def session_of(agents, server, host, start):
    """Connect the session the host was asked to start. A start re-sent meanwhile (the
    first went stale after REDELIVER_AFTER, 2 s here, on a loaded machine) revoked the
    earlier token and carries the live one, which sdk/steerboard_agents/host.py would hand over: use it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            start = json.loads(host.recv(timeout=0.2))  # a newer start, if one came
            continue
        except TimeoutError:
            pass
        try:
            return agents(server, start["token"], "idle"), start
        except InvalidStatus:
            if time.monotonic() > deadline:
                raise

@pytest.mark.django_db(transaction=True)
def test_message_moves_queued_accepted_delivered_and_statuses_change_without_reload(
    inproc_env, served_thread, page, agents
):
    server = served_thread
    team = inproc_env.team_create("alpha")
    lead = team["lead"]["token"]
    inproc_env.operator_create("op")
    tool(server, lead, "spawn_teammate", name="implementer", description="writes the code", prompt="")
    tool(server, lead, "team_task_create", subject="Build the parser", description="tokens and AST")
    tool(server, lead, "team_task_create", subject="Review the parser", description="Read it through.", blocked_by=["task-1"])

    login(page, server, "op", "pw-op")
    open_team(page, server, "alpha")
    page.evaluate("window.__sameDocument = true")
    lead_lane = page.locator('[data-member="lead"]')
    impl_lane = page.locator('[data-member="implementer"]')
    expect(impl_lane).to_have_attribute("data-status", "provisioning")
    open_lane(page, "implementer")  # and it stays open through every live re-render below
    expect(page.locator('[data-task-id="task-2"]')).to_have_attribute("data-ready", "false")

    lead_session = agents(server, lead, "idle")
    expect(lead_lane).to_have_attribute("data-status", "idle")
    lead_session.status("running")
    expect(lead_lane).to_have_attribute("data-status", "running")

    # No session and no host yet: the message waits, queued.
    sent = tool(server, lead, "send_message", target="implementer", message="Start on **task-1**, please.")
    assert sent["status"] == "queued"
    message = impl_lane.locator(f'[data-message-id="{sent["message_id"]}"]')
    expect(message).to_have_attribute("data-state", "queued")
    expect(message.locator(".md strong")).to_have_text("task-1")
    expect(message).to_contain_text("from lead")
    screenshot(page, "live-1-queued")

    # A host connects and is asked to start the implementer: the target's inbox accepted it.
    host = ws_open(server.ws_url + "/ws/host/", team["host_token"])
    try:
        start = json.loads(host.recv(timeout=20))
        assert start["type"] == "start" and start["member"] == "implementer"
        expect(message).to_have_attribute("data-state", "accepted")
        screenshot(page, "live-2-accepted")

        # The session starts, gets the message replayed and works a turn with it.
        impl, start = session_of(agents, server, host, start)
        steer = impl.recv("steer")
        assert steer["message"]["id"] == sent["message_id"]
        expect(impl_lane).to_have_attribute("data-status", "idle")
        impl.status("running")
        expect(impl_lane).to_have_attribute("data-status", "running")
        impl.entry("turn_start", turn_id="turn-1", step=0)
        impl.entry(
            "user_message",
            turn_id="turn-1",
            step=0,
            text=steer["message"]["content"],
            source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"},
        )
        expect(message).to_have_attribute("data-state", "delivered")
        expect(message.locator("time.t-delivered")).to_be_visible()
        expect(impl_lane.locator('[data-column="delivered"] [data-count="delivered"]')).to_have_text("1")
        expect(impl_lane.locator('svg[data-chart="states"] rect[data-state="delivered"]')).to_have_attribute(
            "data-count", "1"
        )
        impl.entry("tool_call", turn_id="turn-1", step=0, name="team_task_update", arguments={"task_id": "task-1"})
        tool(server, start["token"], "team_task_update", task_id="task-1", expected_revision=1, action="claim")
        expect(page.locator('[data-task-id="task-1"]')).to_have_attribute("data-task-status", "in_progress")
        impl.entry("tool_result", turn_id="turn-1", step=0, name="team_task_update", result="claimed task-1")
        impl.entry("assistant_text", turn_id="turn-1", step=1, text="Parsing the tokens now.")
        turn = impl_lane.locator('[data-turn-id="turn-1"]')
        expect(turn.locator('[data-step="0"] [data-entry-message-id]')).to_have_count(1)
        expect(impl_lane.locator("[data-current-turn]")).to_have_attribute("data-current-turn", "turn-1")

        # A second message steers into the running turn at its next step boundary.
        second = tool(server, lead, "send_message", target="implementer", message="Also handle `unicode`.")
        second_el = impl_lane.locator(f'[data-message-id="{second["message_id"]}"]')
        impl.recv("steer", where=lambda f: f["message"]["id"] == second["message_id"])
        expect(second_el).to_have_attribute("data-state", "accepted")
        # Mid-turn, with messages in several states (docs/dashboard.png comes from
        # test_charts_browser.py's demo-like run, with charts over a quarter hour).
        screenshot(page, "team-page")
        impl.entry(
            "user_message",
            turn_id="turn-1",
            step=2,
            text="Also handle `unicode`.",
            source={"kind": "team-message", "message_id": second["message_id"], "sender": "lead"},
        )
        expect(second_el).to_have_attribute("data-state", "delivered")
        expect(turn.locator('[data-step="2"] [data-entry-message-id]')).to_have_attribute(
            "data-entry-message-id", second["message_id"]
        )
        impl.entry("assistant_text", turn_id="turn-1", step=2, text="Done: tokens, AST and unicode.")
        impl.entry("turn_end", turn_id="turn-1", step=2)
        impl.status("idle")
        expect(impl_lane).to_have_attribute("data-status", "idle")
        expect(turn).to_have_attribute("data-ended", "true")
        expect(page.locator('[data-chart="latency"] circle')).to_have_count(2)
        lead_session.status("idle")
        expect(lead_lane).to_have_attribute("data-status", "idle")
        impl.close()
        expect(impl_lane).to_have_attribute("data-status", "inactive")
    finally:
        host.close()

    assert page.evaluate("window.__sameDocument") is True  # all of it without a reload
    assert page.page_errors == []
    screenshot(page, "live-3-delivered")
