"""A team with thousands of messages: the page shows windows and pages, not everything."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, screenshot, tool

pytestmark = [pytest.mark.browser]

BULK = """
from datetime import timedelta
from django.utils import timezone
from mailbox.models import TeamMessage
from teams.models import Member
lead = Member.objects.get(team__name="big", name="lead")
impl = Member.objects.get(team__name="big", name="implementer")
now = timezone.now()
TeamMessage.objects.bulk_create(
    TeamMessage(team_id=lead.team_id, sender=lead, target=impl, content=f"note **{i}**", seq=i, state="delivered",
                queued_at=now - timedelta(seconds=3002 - i), accepted_at=now - timedelta(seconds=3001 - i),
                delivered_at=now - timedelta(seconds=3000 - i))
    for i in range(1, 3001)
)
Member.objects.filter(pk=impl.pk).update(next_seq=3001)
"""


@pytest.mark.django_db(transaction=True)
def test_three_thousand_messages_show_as_a_window_with_pages_behind_it(inproc_env, served_thread, page):
    server = served_thread
    team = inproc_env.team_create("big")
    inproc_env.operator_create("op")
    tool(server, team["lead"]["token"], "spawn_teammate", name="implementer", description="d", prompt="")
    inproc_env.manage("shell", "-c", BULK)

    login(page, server, "op", "pw-op")
    open_team(page, server, "big")
    delivered = page.locator('[data-member="implementer"] [data-column="delivered"]')
    expect(delivered.locator('[data-count="delivered"]')).to_have_text("3000")
    expect(delivered.locator("[data-message-id]")).to_have_count(10)
    expect(delivered.locator("[data-message-id]").first.locator(".md strong")).to_have_text("3000")
    expect(page.locator('[data-chart="latency"] circle')).to_have_count(40)
    screenshot(page, "many-messages")

    open_lane(page, "implementer")
    delivered.get_by_role("link", name="2990 more →").click()
    listed = page.locator('[data-member="implementer"] [data-message-id]')
    expect(listed).to_have_count(50)
    expect(listed.first.locator(".md strong")).to_have_text("3000")
    page.get_by_role("link", name="Older →").click()
    expect(listed).to_have_count(50)
    expect(listed.first.locator(".md strong")).to_have_text("2950")
