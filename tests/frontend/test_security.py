"""What the page refuses: script in messages, controls and actions for viewers."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, operator_opens_team, page_posts, screenshot, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAYLOAD = (
    "Look: <script>window.__pwned = 'script'; alert('script')</script>\n\n"
    "<img src=x onerror=\"window.__pwned = 'onerror'; alert('onerror')\">\n\n"
    "[click me](javascript:window.__pwned='link';alert('link')) and "
    "<a href=\"javascript:alert('raw')\">raw link</a> and <svg onload=\"alert('svg')\"></svg>\n\n"
    "**still bold**"
)


def test_script_onerror_and_javascript_payloads_render_inert_and_readable(inproc_env, served_thread, page, agents):
    server = served_thread
    team = inproc_env.team_create("xss")
    lead = team["lead"]["token"]
    inproc_env.operator_create("op")
    tool(server, lead, "spawn_teammate", name="implementer", description="<b onmouseover=alert(1)>d</b>", prompt="")
    login(page, server, "op", "pw-op")
    open_team(page, server, "xss")
    lane = page.locator('[data-member="implementer"]')
    open_lane(page, "implementer")  # the message shown, not only on the page

    sent = tool(server, lead, "send_message", target="implementer", message=PAYLOAD)
    message = lane.locator(f'[data-message-id="{sent["message_id"]}"]')
    expect(message).to_have_attribute("data-state", "queued")
    body = message.locator(".md")
    expect(body).to_contain_text("<script>window.__pwned = 'script'; alert('script')</script>")
    expect(body).to_contain_text("onerror=")
    expect(body).to_contain_text("javascript:")
    expect(body.locator("strong")).to_have_text("still bold")
    expect(body.locator("script, img, svg, iframe, [onerror], [onload], [onmouseover]")).to_have_count(0)
    expect(body.locator('a[href^="javascript"]')).to_have_count(0)
    # The roster row's one-line preview of it is text as well.
    preview = lane.locator(f'[data-last-message="{sent["message_id"]}"]')
    expect(preview).to_contain_text("<script>window.__pwned = 'script'")
    expect(preview.locator("script, img, svg, iframe, a, [onerror], [onload], [onmouseover]")).to_have_count(0)

    # The same text in a session's history (the timeline) is text too.
    token = inproc_env.manage_json("member_token", "xss", "implementer")["token"]
    session = agents(server, token, "idle")
    steer = session.recv("steer")
    session.entry(
        "user_message",
        turn_id="t",
        step=0,
        text=steer["message"]["content"],
        source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"},
    )
    expect(message).to_have_attribute("data-state", "delivered")
    entry = lane.locator(f'[data-entry-message-id="{sent["message_id"]}"]')
    expect(entry).to_contain_text("<img src=x onerror=")
    expect(lane.locator(".timeline script, .timeline img, .timeline svg:not(.latency)")).to_have_count(0)

    # A later round trip: anything the payload could have scheduled has had its chance.
    later = tool(server, lead, "send_message", target="implementer", message="after")
    expect(lane.locator(f'[data-message-id="{later["message_id"]}"]')).to_be_visible()
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []

    # The paged list of a target's messages renders the same sanitised HTML.
    page.goto(f"{server.url}/teams/xss/members/implementer/messages/")
    listed = page.locator(f'[data-message-id="{sent["message_id"]}"] .md')
    expect(listed).to_contain_text("<script>window.__pwned")
    expect(listed.locator("script, img, svg, a[href^='javascript']")).to_have_count(0)
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []
    screenshot(page, "xss-inert")


def test_viewer_sees_no_controls_and_forged_posts_are_refused(inproc_env, served_thread, page):
    server = served_thread
    team = inproc_env.team_create("watch")
    lead = team["lead"]["token"]
    inproc_env.operator_create("viewer", viewer=True)
    tool(server, lead, "spawn_teammate", name="implementer", description="d", prompt="")
    sent = tool(server, lead, "send_message", target="implementer", message="waits for a session")

    login(page, server, "viewer", "pw-viewer")
    open_team(page, server, "watch")
    message = page.locator(f'[data-member="implementer"] [data-message-id="{sent["message_id"]}"]')
    expect(message).to_have_attribute("data-state", "queued")
    expect(page.locator('[data-action="retry"]')).to_have_count(0)
    expect(page.locator('[data-action="retry-all"]')).to_have_count(0)
    expect(page.locator('[data-action="prompt"]')).to_have_count(0)
    expect(page.locator("[data-role]").first).to_contain_text("viewer")
    screenshot(page, "viewer-no-controls")

    # Forged from the viewer's own signed-in page, with a valid CSRF token: refused all the same.
    answers = page_posts(page, [
        ("/api/v1/teams/watch/prompts", {"target": "implementer", "content": "forged"}),
        (f"/api/v1/teams/watch/messages/{sent['message_id']}/retry", None),
        ("/api/v1/teams/watch/members/implementer/retry", None),
    ])
    assert answers == [[403, "FORBIDDEN"]] * 3
    prompts = page.evaluate("async () => (await (await fetch('/api/v1/teams/watch/prompts')).json()).prompts")
    assert prompts == []


def test_operator_post_without_csrf_token_is_refused(inproc_env, served_thread, page):
    server = served_thread
    inproc_env.team_create("csrf")
    operator_opens_team(page, inproc_env, server, "csrf")
    status = page.evaluate(
        """async () => (await fetch('/api/v1/teams/csrf/prompts', {method: 'POST',
            headers: {'Content-Type': 'application/json'},
            body: JSON.stringify({target: 'lead', content: 'no token'})})).status"""
    )
    assert status == 403
    prompts = page.evaluate("async () => (await (await fetch('/api/v1/teams/csrf/prompts')).json()).prompts")
    assert prompts == []
