"""The team page as a compact roster (issue 33 item 9), in Chromium: a team of eight fits a
1440×900 laptop screen with every member's status above the fold; a lane opens on its summary
to its messages, charts and timeline, and stays open while the page re-renders it live; a
chart is drawn only when the window holds a history to show (a short run gets the numbers).

Against the application served in-process (tests/support/inproc.py ``served_thread``)."""
import re

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import open_lane, operator_opens_team, screenshot, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEAMMATES = ["researcher", "planner", "implementer", "tester", "reviewer", "writer", "ops"]

# A quarter hour of deliveries to the implementer, one a minute.
HISTORY = """
from datetime import timedelta
from django.utils import timezone
from mailbox.models import TeamMessage
from teams.models import Member
team = "{team}"
lead = Member.objects.get(team__name=team, name="lead")
impl = Member.objects.get(team__name=team, name="implementer")
first = impl.next_seq
now = timezone.now()
rows = []
for i in range(12):
    delivered = now - timedelta(minutes=12 - i, seconds=10)
    rows.append(TeamMessage(team_id=lead.team_id, sender=lead, target=impl, content=f"round {{i}}", seq=first + i,
                            state="delivered", queued_at=delivered - timedelta(seconds=1),
                            accepted_at=delivered - timedelta(seconds=1), delivered_at=delivered))
TeamMessage.objects.bulk_create(rows)
Member.objects.filter(pk=impl.pk).update(next_seq=first + 12)
"""


def _team_of_eight(inproc_env, server, name: str) -> dict:
    team = inproc_env.team_create(name)
    lead = team["lead"]["token"]
    for mate in TEAMMATES:
        tool(server, lead, "spawn_teammate", name=mate, description=f"the team's {mate}", prompt="")
    # Some messages: each teammate gets one from the Lead (queued: no session, no host), with
    # a long Markdown body that the roster row shows as one line.
    sent = {}
    for mate in TEAMMATES:
        body = f"**{mate}**, please pick up the next task. " + "Here is a long explanation of it. " * 12
        sent[mate] = tool(server, lead, "send_message", target=mate, message=body)["message_id"]
    return {"team": team, "sent": sent}


def test_a_team_of_eight_fits_a_laptop_screen_and_a_lane_opens_to_its_messages(inproc_env, served_thread, page):
    server = served_thread
    made = _team_of_eight(inproc_env, server, "eight")
    operator_opens_team(page, inproc_env, server, "eight", viewport={"width": 1440, "height": 900})

    lanes = page.locator("#lanes > [data-member]")
    expect(lanes).to_have_count(8)
    expect(page.locator('[data-member="ops"] [data-last-message]')).to_have_attribute(
        "data-last-message", made["sent"]["ops"]
    )
    # Nobody runs them (no session, no host): the seven teammates and their messages need
    # attention, and the list above the roster does not push it off the screen.
    expect(page.locator("[data-attention-panel]")).to_have_attribute("data-attention-count", "14")
    # Every member's status (and its lane's head) is on the first screen, without scrolling.
    assert page.evaluate("() => window.scrollY") == 0
    for name in ["lead", *TEAMMATES]:
        status = page.locator(f'[data-member="{name}"] [data-status-label]')
        expect(status).to_be_visible()
        box = status.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, f"{name}'s status is at {box} (below the fold)"
        row = page.locator(f'[data-member="{name}"] .lane-summary').bounding_box()
        assert row["y"] + row["height"] <= 900, f"{name}'s counts and last message are below the fold"
    roster_bottom = page.evaluate("() => document.getElementById('lanes').getBoundingClientRect().bottom")
    assert roster_bottom <= 900, f"the roster ends at {roster_bottom} px"
    # The page as a whole stays short: the side column (forms, the team's charts once, the
    # board) is what may run past the fold, not eight lanes of charts.
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height <= 1800, f"the page is {height} px tall"
    # Collapsed, a lane's messages and charts are on the page (hooks stay) but not shown.
    card = page.locator(f'[data-member="tester"] [data-message-id="{made["sent"]["tester"]}"]')
    expect(card).to_have_attribute("data-state", "queued")
    expect(card).to_be_hidden()
    expect(page.locator('[data-member="tester"]')).to_have_attribute("data-expanded", "false")
    # The row shows the last message as one line of text, its Markdown read as text.
    last = page.locator('[data-member="tester"] [data-last-message] .last-text')
    expect(last).to_contain_text("tester, please pick up the next task.")
    assert last.evaluate("e => e.getBoundingClientRect().height") < 24
    overflow = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert overflow[0] <= overflow[1], f"the page is {overflow[0]} px wide in a {overflow[1]} px viewport"
    screenshot(page, "compact-roster-1440")

    # Opened, its messages are there; it stays open when the page re-renders it live.
    open_lane(page, "tester")
    expect(card).to_be_visible()
    expect(card.locator(".md strong")).to_have_text("tester")
    expect(page.locator('[data-member="tester"] [data-column="queued"] [data-count="queued"]')).to_have_text("1")
    expect(page.locator('[data-member="reviewer"]')).to_have_attribute("data-expanded", "false")
    again = tool(server, made["team"]["lead"]["token"], "send_message", target="tester", message="And one more.")
    second = page.locator(f'[data-member="tester"] [data-message-id="{again["message_id"]}"]')
    expect(second).to_be_visible()
    expect(page.locator('[data-member="tester"] [data-column="queued"] [data-count="queued"]')).to_have_text("2")
    expect(page.locator('[data-member="tester"]')).to_have_attribute("data-expanded", "true")
    expect(page.locator('[data-member="tester"] [data-last-message]')).to_have_attribute(
        "data-last-message", again["message_id"]
    )
    # ... and after a reload (per tab); closing it hides the messages again.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-connection", "live")
    expect(second).to_be_visible()
    page.locator('[data-member="tester"] .lane-summary').click()
    expect(second).to_be_hidden()
    expect(page.locator('[data-member="tester"]')).to_have_attribute("data-expanded", "false")
    # The lane's summary is a real disclosure control, named for its member and counts.
    summary = page.locator('[data-member="tester"] .lane-summary')
    assert summary.get_attribute("aria-label").startswith("tester: 2 queued, 0 accepted, 0 delivered")
    summary.focus()
    page.keyboard.press("Enter")
    expect(page.locator('[data-member="tester"]')).to_have_attribute("data-expanded", "true")
    # A live re-render of the lane keeps the keyboard's place on its summary.
    third = tool(server, made["team"]["lead"]["token"], "send_message", target="tester", message="Third.")
    expect(page.locator(f'[data-member="tester"] [data-message-id="{third["message_id"]}"]')).to_be_visible()
    expect(page.locator(":focus")).to_have_attribute("aria-label", re.compile(r"^tester: 3 queued"))
    page.keyboard.press("Enter")
    expect(page.locator('[data-member="tester"]')).to_have_attribute("data-expanded", "false")
    assert page.page_errors == []


def test_charts_are_drawn_only_when_there_is_history_to_show(inproc_env, served_thread, page):
    server = served_thread
    made = _team_of_eight(inproc_env, server, "shortrun")
    operator_opens_team(page, inproc_env, server, "shortrun", viewport={"width": 1440, "height": 900})

    # A short run: all its traffic is in the last minute or two. Numbers, no charts.
    panel = page.locator("#team-charts")
    expect(panel).to_have_attribute("data-history", "false")
    expect(panel.locator("svg[data-chart]")).to_have_count(0)
    expect(panel.locator('[data-chart-numbers="team"] [data-number="depth"]')).to_have_text("7")
    expect(panel.locator("[data-no-history]")).to_be_visible()
    tester = page.locator('[data-lane-charts="tester"]')
    expect(tester).to_have_attribute("data-history", "false")
    expect(tester.locator('[data-number="depth"]')).to_have_text("1")
    expect(tester.locator("svg[data-chart]")).to_have_count(0)

    # A quarter hour of deliveries to the implementer: its lane and the team get charts; the
    # lanes without a history still do not.
    inproc_env.manage("shell", "-c", HISTORY.format(team="shortrun"))
    tool(server, made["team"]["lead"]["token"], "send_message", target="writer", message="ring")  # a doorbell
    expect(panel).to_have_attribute("data-history", "true")
    expect(panel.locator('svg[data-chart="msg-rate"]')).to_have_count(1)
    impl = page.locator('[data-lane-charts="implementer"]')
    expect(impl).to_have_attribute("data-history", "true")
    expect(impl.locator('[data-number="delivered"]')).to_have_text("12")
    open_lane(page, "implementer")
    expect(impl.locator('svg[data-chart="msg-rate"]')).to_be_visible()
    expect(impl.locator('svg[data-chart="pending-depth"]')).to_be_visible()
    expect(tester).to_have_attribute("data-history", "false")
    expect(page.locator("[data-lane-charts] svg[data-chart]")).to_have_count(3)  # the implementer's only
    screenshot(page, "compact-roster-charts")
    assert page.page_errors == []
