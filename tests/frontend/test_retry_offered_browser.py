"""In Chromium: retry is offered only for what is stuck (issue 33 item 4). A message in
its normal second or two in ``accepted`` has no retry button, nor its lane a "retry all";
one past the attention threshold, or queued with a reason, has them
(frontend/attention.py, ``message_stuck``)."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_team, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _execute(inproc_env, sql: str) -> None:
    """A write to the test database, on a thread of its own (inproc_env.query only reads)."""
    from django.db import connection

    def write():
        with connection.cursor() as cursor:
            cursor.execute(sql)

    inproc_env._on_thread(write)


def test_retry_is_offered_only_for_messages_past_the_threshold_or_queued_with_a_reason(
    inproc_env, served_thread, settings, page, agents
):
    server = served_thread
    # A threshold no healthy delivery reaches while the test looks.
    settings.STEERBOARD = {**settings.STEERBOARD, "ATTENTION_AFTER": 60.0}
    lead = inproc_env.team_create("calm")["lead"]["token"]
    inproc_env.operator_create("op")
    tool(server, lead, "spawn_teammate", name="coder", description="codes", prompt="")
    tool(server, lead, "spawn_teammate", name="reviewer", description="reviews", prompt="")
    coder = agents(server, inproc_env.manage_json("member_token", "calm", "coder")["token"], "idle")
    login(page, server, "op", "pw-op")
    open_team(page, server, "calm")

    # Pushed to the coder's session and not yet in its history: accepted, as every message is for a moment.
    sent = tool(server, lead, "send_message", target="coder", message="Parse it.")
    coder.recv("steer")
    lane = page.locator('[data-member="coder"]')
    card = lane.locator(f'[data-message-id="{sent["message_id"]}"]')
    expect(card).to_have_attribute("data-state", "accepted")
    expect(card.locator('[data-action="cancel"]')).to_have_count(1)  # it can still be taken back
    expect(card.locator('[data-action="retry"]')).to_have_count(0)
    expect(lane.locator('[data-action="retry-all"]')).to_have_count(0)

    # Queued with a reason: the reviewer has no session and the team no host.
    waiting = tool(server, lead, "send_message", target="reviewer", message="Review it.")
    other = page.locator('[data-member="reviewer"]')
    queued = other.locator(f'[data-message-id="{waiting["message_id"]}"]')
    expect(queued).to_have_attribute("data-state", "queued")
    expect(queued.locator(".last-error")).to_contain_text("no host")
    expect(queued.locator('[data-action="retry"]')).to_have_count(1)
    expect(other.locator('[data-action="retry-all"]')).to_have_count(1)

    # The coder's message has now been accepted for longer than the threshold: stuck.
    _execute(inproc_env, f"UPDATE mailbox_teammessage SET accepted_at = '2020-01-01 00:00:00' "
                       f"WHERE id = '{sent['message_id']}'")
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    expect(card.locator('[data-action="retry"]')).to_have_count(1)
    expect(lane.locator('[data-action="retry-all"]')).to_have_count(1)
    expect(page.locator(f'[data-attention="message"][data-message-id="{sent["message_id"]}"]')).to_have_count(1)

    # Delivered: nothing to retry any more.
    coder.entry("user_message", text="Parse it.",
                source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"})
    expect(card).to_have_attribute("data-state", "delivered")
    expect(card.locator('[data-action="retry"]')).to_have_count(0)
    expect(lane.locator('[data-action="retry-all"]')).to_have_count(0)
    assert page.page_errors == []
