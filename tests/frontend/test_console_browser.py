"""In Chromium, the operator console (issue 14): Needs attention, a message's trace, the team
messages page's filters, and a team retry. The server (served in-process) runs with the live
timings, REDELIVER_AFTER = 2 s, so the attention threshold is 2 s."""
import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, screenshot, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _setup(inproc_env, server, team: str, *members: str) -> dict:
    lead = inproc_env.team_create(team)["lead"]["token"]
    inproc_env.operator_create("op")
    tokens = {"lead": lead}
    for name in members:
        tool(server, lead, "spawn_teammate", name=name, description=f"the {name}", prompt="")
        tokens[name] = inproc_env.manage_json("member_token", team, name)["token"]
    return tokens


def _integrate(session, message: dict) -> None:
    session.entry(
        "user_message", text=message["content"],
        source={"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
    )


# ages.js's exact time: the reader's local date and time with its UTC offset.
EXACT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+−]\d\d:\d\d$")


def _event_order(page) -> list[str]:
    return page.locator("[data-event]").evaluate_all("rows => rows.map(r => r.dataset.event)")


def test_a_stuck_message_needs_attention_until_delivered_and_its_trace_reads_in_order(
    inproc_env, served_thread, page, agents
):
    server = served_thread
    tokens = _setup(inproc_env, server, "stuck", "coder", "reviewer")
    coder = agents(server, tokens["coder"], "idle")
    login(page, server, "op", "pw-op")
    open_team(page, server, "stuck")
    panel = page.locator("[data-attention-panel]")
    expect(panel.locator("[data-attention-count]")).to_have_text("0")

    sent = tool(server, tokens["lead"], "send_message", target="coder", message="Parse the header.")
    steer = coder.recv("steer")["message"]  # pushed; the session sits on it
    item = panel.locator(f'[data-attention="message"][data-message-id="{sent["message_id"]}"]')
    expect(item).to_be_visible()  # once it has waited past the threshold (2 s)
    expect(item).to_contain_text("stuck")
    expect(item.locator("[data-trace-link]")).to_have_attribute("href", f"/teams/stuck/messages/{sent['message_id']}/")
    screenshot(page, "console-attention")

    coder.entry("turn_start", turn_id="turn-1")
    _integrate(coder, steer)
    expect(item).to_have_count(0)
    expect(page.locator(f'[data-member="coder"] [data-message-id="{sent["message_id"]}"]')).to_have_attribute(
        "data-state", "delivered"
    )

    # Its trace, from the message card's link (in the coder's lane, opened).
    open_lane(page, "coder")
    page.locator(f'[data-member="coder"] [data-trace-link="{sent["message_id"]}"]').click()
    page.wait_for_url(re.compile(f"/teams/stuck/messages/{sent['message_id']}/$"))
    order = [kind for kind in _event_order(page) if kind != "repushed"]
    assert order == ["queued", "accepted", "delivered"], order
    expect(page.locator('[data-event="delivered"]')).to_be_visible()
    expect(page.locator("[data-delivered-by]")).to_contain_text("turn-1")
    # Every time on the trace is an age ("3 s ago"), the exact local time on hover (ages.js).
    ages = page.locator("[data-event] time[data-ago]")
    expect(ages).to_have_count(page.locator("[data-event]").count())
    for age in ages.all():
        expect(age).to_have_text(re.compile(r"^(just now|\d+ (s|min) ago)$"))
        expect(age).to_have_attribute("title", EXACT)
    delivered_at = page.locator("[data-delivered-by] time[data-ago]")
    expect(delivered_at).to_have_text(re.compile(r"^entered (just now|\d+ s ago)$"))
    expect(delivered_at).to_have_attribute("title", EXACT)
    screenshot(page, "console-trace-delivered")

    # A refused admission: the reviewer has no session and the team no host.
    refused = tool(server, tokens["lead"], "send_message", target="reviewer", message="Review it.")
    page.goto(f"{server.url}/teams/stuck/messages/{refused['message_id']}/")
    assert _event_order(page) == ["queued", "failed"]
    expect(page.locator('[data-event="failed"]')).to_contain_text("no host")

    # A prompt waiting for the reviewer needs attention too; its item leads to the reviewer's lane.
    open_team(page, server, "stuck")
    form = page.locator('form[data-action="prompt"]')
    form.locator('select[name="target"]').select_option("reviewer")
    form.locator('textarea[name="content"]').fill("Any news?")
    form.get_by_role("button", name="Send prompt").click()
    waiting = panel.locator('[data-attention="prompt"][data-target="reviewer"]')
    expect(waiting).to_be_visible()  # once it has waited past the threshold
    expect(waiting).to_have_attribute("data-prompt-id", re.compile(r"^prompt-"))
    lane_link = waiting.locator('a[data-lane-link="reviewer"]')
    expect(lane_link).to_have_attribute("href", "#lane-reviewer")
    lane_link.click()
    page.wait_for_url(re.compile(r"#lane-reviewer$"))
    expect(page.locator('[data-member="reviewer"]')).to_have_attribute("data-expanded", "true")  # the link opens it
    expect(page.locator('[data-member="reviewer"] [data-prompt-id]')).to_have_attribute("data-state", "queued")
    assert page.page_errors == []


def test_filters_narrow_the_team_messages_and_survive_a_reload(inproc_env, served_thread, page, agents):
    server = served_thread
    tokens = _setup(inproc_env, server, "search", "coder", "reviewer")
    agents(server, tokens["coder"], "idle")  # the coder takes its messages (accepted); the reviewer has none
    wanted = tool(server, tokens["lead"], "send_message", target="reviewer", message="Review the lexer, please.")
    tool(server, tokens["lead"], "send_message", target="reviewer", message="Review the parser too.")
    tool(server, tokens["lead"], "send_message", target="coder", message="Write the lexer.")
    tool(server, tokens["coder"], "send_message", target="reviewer", message="The lexer is ready.")

    login(page, server, "op", "pw-op")
    page.goto(f"{server.url}/teams/search/messages/")
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    cards = page.locator("[data-team-messages] > [data-message-id]")
    expect(cards).to_have_count(4)

    page.get_by_label("State").select_option("queued")
    page.get_by_label("Sender").select_option("lead")
    page.get_by_label("Text").fill("lexer")
    page.get_by_role("button", name="Filter", exact=True).click()
    page.wait_for_url(re.compile(r"state=queued"))
    expect(cards).to_have_count(1)
    expect(cards.first).to_have_attribute("data-message-id", wanted["message_id"])
    expect(cards.first.locator(".target")).to_have_text("reviewer")

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    expect(cards).to_have_count(1)
    expect(cards.first).to_have_attribute("data-message-id", wanted["message_id"])
    expect(page.get_by_label("State")).to_have_value("queued")
    expect(page.get_by_label("Sender")).to_have_value("lead")
    expect(page.get_by_label("Text")).to_have_value("lexer")

    # Live: a new message that matches shows up without a reload; one that does not, does not.
    later = tool(server, tokens["lead"], "send_message", target="reviewer", message="And the lexer's tests.")
    tool(server, tokens["lead"], "send_message", target="reviewer", message="Unrelated.")
    expect(cards).to_have_count(2)
    expect(cards.first).to_have_attribute("data-message-id", later["message_id"])
    screenshot(page, "console-messages-filtered")

    # The old member-messages URL lands here, filtered by its target.
    page.goto(f"{server.url}/teams/search/members/coder/messages/")
    page.wait_for_url(re.compile(r"/teams/search/messages/\?target=coder"))
    expect(cards).to_have_count(1)
    assert page.page_errors == []


def test_a_team_retry_moves_the_stuck_messages_and_says_how_many(inproc_env, served_thread, page, agents):
    server = served_thread
    tokens = _setup(inproc_env, server, "retry", "coder")
    coder = agents(server, tokens["coder"], "idle")
    sent = [tool(server, tokens["lead"], "send_message", target="coder", message=f"Task {i}.") for i in range(3)]
    for _ in sent:
        coder.recv("steer")  # pushed, and lost as far as the session is concerned

    login(page, server, "op", "pw-op")
    open_team(page, server, "retry")
    panel = page.locator("[data-attention-panel]")
    expect(panel.locator('[data-attention="message"]')).to_have_count(3)

    retry_all = panel.locator('[data-action="retry-team"]')
    expect(retry_all).to_be_visible()
    retry_all.click()
    expect(panel.locator("[data-retry-team-status]")).to_have_attribute("data-retried", "3")
    # The retry pushed each again: the session now takes them into its history.
    ids = {m["message_id"] for m in sent}
    pushed: dict[str, dict] = {}
    while set(pushed) != ids:  # all three first: waiting for an ack would skip the other steers
        message = coder.recv("steer", where=lambda f: f["message"]["id"] in ids - set(pushed))["message"]
        pushed[message["id"]] = message
    for message in pushed.values():
        _integrate(coder, message)
    expect(panel.locator('[data-attention="message"]')).to_have_count(0)
    expect(retry_all).to_be_hidden()  # nothing stuck: nothing to retry
    lane = page.locator('[data-member="coder"]')
    expect(lane.locator('[data-count="delivered"]')).to_have_text("3")

    trace = httpx.get(
        f"{server.url}/api/v1/teams/retry/messages/{sent[0]['message_id']}",
        headers={"Authorization": f"Bearer {tokens['lead']}"}, timeout=30,
    ).json()
    kinds = [e["kind"] for e in trace["events"]]
    assert kinds[0] == "queued" and "retried" in kinds and kinds[-1] == "delivered", kinds
    assert next(e for e in trace["events"] if e["kind"] == "retried")["by"] == "op"
    assert page.page_errors == []
