"""The team page in Chromium: charts with real ticks and numbers over a chosen window, relative
ages with the exact time on hover, the Lead's lane after an MCP inbox read, the prompt form
following its prompt, and a layout that holds at 1280 px and at a phone's 390 px.

Against the application served in-process (tests/support/inproc.py ``served_thread``), on
the test's own database."""
import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, operator_opens_team, screenshot, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Twenty deliveries to the implementer over the last twelve minutes (18 in 1 s, 2 in 30 s),
# five to the reviewer forty minutes ago (2 s each), two messages still queued for the reviewer.
HISTORY = """
from datetime import timedelta
from django.utils import timezone
from mailbox.models import TeamMessage
from teams.models import Member
team = "{team}"
lead = Member.objects.get(team__name=team, name="lead")
impl = Member.objects.get(team__name=team, name="implementer")
rev = Member.objects.get(team__name=team, name="reviewer")
now = timezone.now()
rows = []
for i in range(1, 21):
    latency = 30 if i in (7, 15) else 1
    delivered = now - timedelta(seconds=720 - i * 30)
    rows.append(TeamMessage(team_id=lead.team_id, sender=lead, target=impl, content=f"step **{{i}}**", seq=i,
                            state="delivered", queued_at=delivered - timedelta(seconds=latency),
                            accepted_at=delivered - timedelta(seconds=latency), delivered_at=delivered))
for i in range(1, 8):
    delivered = now - timedelta(minutes=40, seconds=-i) if i <= 5 else None
    rows.append(TeamMessage(team_id=lead.team_id, sender=impl, target=rev, content=f"review {{i}}", seq=i,
                            state="delivered" if delivered else "queued",
                            queued_at=(delivered - timedelta(seconds=2)) if delivered else now - timedelta(seconds=20),
                            accepted_at=delivered, delivered_at=delivered))
TeamMessage.objects.bulk_create(rows)
Member.objects.filter(pk=impl.pk).update(next_seq=21)
Member.objects.filter(pk=rev.pk).update(next_seq=8)
"""

EXACT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+−]\d\d:\d\d$")


def _team_with_history(inproc_env, server, name: str) -> dict:
    team = inproc_env.team_create(name)
    lead = team["lead"]["token"]
    tool(server, lead, "spawn_teammate", name="implementer", description="writes the code", prompt="")
    tool(server, lead, "spawn_teammate", name="reviewer", description="reads it through", prompt="")
    inproc_env.manage("shell", "-c", HISTORY.format(team=name))
    return team


def _no_horizontal_overflow(page) -> None:
    overflow = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert overflow[0] <= overflow[1], f"page is {overflow[0]} px wide in a {overflow[1]} px viewport"


def test_charts_render_with_ticks_and_numbers_and_the_window_switch_works(inproc_env, served_thread, page):
    server = served_thread
    _team_with_history(inproc_env, server, "charts")
    operator_opens_team(page, inproc_env, server, "charts", viewport={"width": 1280, "height": 900})

    panel = page.locator("#team-charts")
    expect(panel).to_have_attribute("data-window", "15m")
    rate = panel.locator('svg[data-chart="msg-rate"]')
    expect(rate.locator(".y-tick")).to_have_count(5)  # 0 and four round steps, not only min and max
    expect(rate.locator(".x-tick text")).to_have_text(["−15 min", "−10 min", "−5 min", "now"])
    ticks = [float(t) for t in rate.locator(".y-tick").evaluate_all("els => els.map(e => e.dataset.tick)")]
    assert ticks[0] == 0 and all(b > a for a, b in zip(ticks, ticks[1:]))
    # Readable: the axis labels are drawn at 9 px or more on the screen.
    font = rate.locator(".y-tick text").first.evaluate(
        "t => parseFloat(getComputedStyle(t).fontSize) * t.ownerSVGElement.getBoundingClientRect().width / 320"
    )
    assert font >= 9

    numbers = page.locator('[data-chart-numbers="team"]')
    expect(panel.locator('[data-legend]')).to_have_count(3)
    expect(panel).not_to_contain_text("null")
    expect(numbers.locator('[data-number="depth"]')).to_have_text("2")
    expect(numbers.locator('[data-number="delivered"]')).to_have_text("20")
    expect(numbers.locator('[data-number="p50"]')).to_have_text("1 s")
    expect(numbers.locator('[data-number="p95"]')).to_have_text("30 s")

    impl = page.locator('[data-lane-charts="implementer"]')
    expect(impl.locator('[data-number="delivered"]')).to_have_text("20")
    expect(impl.locator('[data-number="p95"]')).to_have_text("30 s")
    expect(page.locator('[data-lane-charts="reviewer"] [data-number="depth"]')).to_have_text("2")
    # The two slow deliveries are clipped and marked in the percentile chart, not flattening it.
    latency = impl.locator('svg[data-chart="latency-percentiles"]')
    expect(latency.locator("[data-clipped]")).to_have_count(2)
    assert float(latency.get_attribute("data-y-max")) < 30
    # One colour per member: the lane's swatch, its series, the team chart's and the legend agree.
    # Read in one turn of the page's script: the charts redraw every few seconds (charts.js), and
    # an element read after a redraw replaced it has no computed style ('' on a loaded run).
    colour, lane_line, team_line, legend, reviewer = page.evaluate("""() => {
        const style = (selector, pseudo) => getComputedStyle(document.querySelector(selector), pseudo);
        return [style('[data-member="implementer"] .swatch').backgroundColor,
                style('[data-lane-charts="implementer"] svg[data-chart="msg-rate"] polyline').stroke,
                style('#team-charts svg[data-chart="msg-rate"] polyline.c1').stroke,
                style('[data-legend="implementer"]', '::before').color,
                style('[data-member="reviewer"] .swatch').backgroundColor];
    }""")
    assert colour == lane_line == team_line == legend
    assert reviewer != colour

    # 1 h: the reviewer's deliveries forty minutes ago come in; the switch survives a reload.
    page.get_by_role("button", name="1 h").click()
    expect(panel).to_have_attribute("data-window", "1h")
    expect(page.get_by_role("button", name="1 h")).to_have_attribute("aria-pressed", "true")
    expect(rate.locator(".x-tick text")).to_have_text(["−1 h", "−45 min", "−30 min", "−15 min", "now"])
    expect(numbers.locator('[data-number="delivered"]')).to_have_text("25")
    expect(page.locator('[data-lane-charts="reviewer"] [data-number="p50"]')).to_have_text("2 s")
    expect(page.locator('[data-lane-charts="reviewer"]')).to_have_attribute("data-window", "1h")
    assert "window=1h" in page.url
    page.reload()
    expect(page.locator("#team-charts")).to_have_attribute("data-window", "1h")
    # 24 h: the same hour of traffic is one or two of its 30-min buckets, a spike at "now":
    # the numbers, and no chart (the axis of 24 h: tests/frontend/test_charts.py).
    page.get_by_role("button", name="24 h").click()
    expect(panel).to_have_attribute("data-window", "24h")
    expect(numbers.locator('[data-number="delivered"]')).to_have_text("25")
    expect(panel).to_have_attribute("data-history", "false")
    expect(panel.locator("svg[data-chart]")).to_have_count(0)
    expect(panel.locator("[data-no-history]")).to_contain_text("30-min buckets of the last 24 h")
    page.get_by_role("button", name="15 min").click()
    expect(numbers.locator('[data-number="delivered"]')).to_have_text("20")
    expect(panel).to_have_attribute("data-history", "true")

    # Relative ages with the exact time on hover.
    delivered = page.locator('[data-member="implementer"] [data-state="delivered"] time.t-delivered').first
    expect(delivered).to_have_text(re.compile(r"^delivered \d+ (s|min) ago$"))
    assert EXACT.match(delivered.get_attribute("title")), delivered.get_attribute("title")
    queued = page.locator('[data-member="reviewer"] [data-state="queued"] time.t-queued').first
    before = queued.text_content()
    expect(queued).not_to_have_text(before)  # it counts up on its own
    assert page.locator('[data-member="lead"] time[data-status-since]').text_content().startswith("for ")
    screenshot(page, "charts-1280")
    _no_horizontal_overflow(page)
    assert page.page_errors == []


def test_a_phone_width_has_no_horizontal_overflow_and_the_page_works_by_keyboard(inproc_env, served_thread, page, agents):
    server = served_thread
    team = _team_with_history(inproc_env, server, "phone")
    inproc_env.operator_create("op")
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, server, "op", "pw-op")
    _no_horizontal_overflow(page)
    open_team(page, server, "phone")
    _no_horizontal_overflow(page)

    # Keyboard: the first Tab reaches the skip link, which moves focus to the content.
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    page.keyboard.press("Enter")
    expect(page.locator(":focus")).to_have_attribute("id", "main")
    choice = page.get_by_role("button", name="1 h")
    choice.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#team-charts")).to_have_attribute("data-window", "1h")
    # Every control has a name; the form's fields have labels.
    expect(page.get_by_label("To", exact=True)).to_be_visible()
    expect(page.get_by_label("Prompt", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Retry all undelivered messages to reviewer")).to_be_visible()
    expect(page.get_by_role("region", name="Team over time")).to_be_visible()
    # A state change is announced in the live region.
    announcer = page.locator("[data-announcer]")
    expect(announcer).to_have_attribute("aria-live", "polite")
    agents(server, team["lead"]["token"], "idle")
    expect(announcer).to_contain_text("lead is now idle")
    _no_horizontal_overflow(page)
    # An opened lane at 390 px: its charts, columns and timeline fit the screen too.
    open_lane(page, "implementer")
    expect(page.locator('[data-lane-charts="implementer"] svg[data-chart="msg-rate"]')).to_be_visible()
    _no_horizontal_overflow(page)
    screenshot(page, "charts-390")
    assert page.page_errors == []


def test_the_leads_lane_is_not_in_a_turn_after_an_mcp_inbox_read(inproc_env, served_thread, page):
    from tests.e2e.test_mcp import mcp_client

    server = served_thread
    team = inproc_env.team_create("poll")
    lead = team["lead"]["token"]
    tool(server, lead, "spawn_teammate", name="implementer", description="d", prompt="")
    impl = inproc_env.manage_json("member_token", "poll", "implementer")["token"]
    sent = tool(server, impl, "send_message", target="lead", message="Done with task-1.")
    operator_opens_team(page, inproc_env, server, "poll")
    lane = page.locator('[data-member="lead"]')
    expect(lane.locator(f'[data-message-id="{sent["message_id"]}"]')).to_have_attribute("data-state", "queued")

    async def read_inbox():
        async with mcp_client(server, lead) as client:
            read = await client.read_resource("steerboard://inbox?after_seq=0")
            return json.loads(read.contents[0].text)

    # On a thread of its own: Playwright's sync API keeps an event loop running on this one.
    with ThreadPoolExecutor(1) as pool:
        page_read = pool.submit(asyncio.run, read_inbox()).result(timeout=60)
    assert [m["id"] for m in page_read["messages"]] == [sent["message_id"]]
    expect(lane.locator(f'[data-message-id="{sent["message_id"]}"]')).to_have_attribute("data-state", "delivered")
    turn = lane.locator("[data-turn-id]")
    expect(turn).to_have_count(1)
    expect(turn.locator('[data-entry-kind="user_message"]')).to_have_count(1)
    status = lane.get_attribute("data-status")
    assert status != "running"
    expect(turn).to_have_attribute("data-in-progress", "false")
    expect(lane.locator(".turn-head")).not_to_contain_text("in progress")
    expect(lane.locator("[data-current-turn]")).to_have_text("")
    screenshot(page, "lead-after-mcp-inbox-read")


def test_the_prompt_form_follows_its_prompt_until_it_completed(inproc_env, served_thread, page, agents):
    server = served_thread
    team = inproc_env.team_create("asks")
    inproc_env.operator_create("op")
    session = agents(server, team["lead"]["token"], "idle")
    login(page, server, "op", "pw-op")
    open_team(page, server, "asks")
    form = page.locator('form[data-action="prompt"]')
    form.locator('select[name="target"]').select_option("lead")
    form.locator('textarea[name="content"]').fill("Summarise the day.")
    form.get_by_role("button", name="Send prompt").click()
    status = form.locator("[data-prompt-status]")
    pushed = session.recv("prompt")
    prompt_id = pushed["prompt"]["id"]
    session.status("running")
    session.entry("turn_start", turn_id="p-1", step=0)
    session.entry("prompt", turn_id="p-1", step=0, prompt_id=prompt_id, text=pushed["prompt"]["content"])
    expect(status).to_have_text("lead is running it")
    session.entry("assistant_text", turn_id="p-1", step=0, text="A quiet day.")
    session.entry("turn_end", turn_id="p-1", step=0)
    session.status("idle")
    expect(status).to_have_text("lead completed it")
    expect(page.locator("[data-announcer]")).to_contain_text("Prompt to lead: lead completed it.")


# The quarter hour before the picture: the researcher and the implementer each got a
# message a minute or so, and reported back to the Lead; one slow delivery (45 s).
DEMO_HISTORY = """
import random
from datetime import timedelta
from django.utils import timezone
from mailbox.models import TeamMessage
from teams.models import Member
random.seed(14)
members = {m.name: m for m in Member.objects.filter(team__name="demo")}
now = timezone.now()
rows, seqs = [], {name: 0 for name in members}
for minute in range(14, 0, -1):
    for sender, target in (("lead", "researcher"), ("lead", "implementer"), ("researcher", "lead"), ("implementer", "lead")):
        slow = (minute, target) == (9, "implementer")
        if random.random() < 0.35 and not slow:
            continue
        seqs[target] += 1
        latency = 45.0 if slow else random.uniform(0.2, 3.5)
        delivered = now - timedelta(minutes=minute, seconds=random.uniform(0, 50))
        rows.append(TeamMessage(team_id=members[target].team_id, sender=members[sender], target=members[target],
                                content=f"{sender} → {target}: round {15 - minute}", seq=seqs[target], state="delivered",
                                queued_at=delivered - timedelta(seconds=latency),
                                accepted_at=delivered - timedelta(seconds=latency / 2), delivered_at=delivered))
TeamMessage.objects.bulk_create(rows)
for name, seq in seqs.items():
    Member.objects.filter(pk=members[name].pk).update(next_seq=seq + 1)
"""


def test_a_demo_like_run_for_the_picture_in_the_docs(inproc_env, served_thread, page, agents):
    """A team at work: sessions over the wire, messages in every state, a turn running, charts
    over the last quarter hour (docs/dashboard.png itself comes from a real demo run:
    scripts/dashboard_screenshot.py)."""
    server = served_thread
    team = inproc_env.team_create("demo")
    lead = team["lead"]["token"]
    tool(server, lead, "spawn_teammate", name="researcher", description="finds what the code needs", prompt="")
    tool(server, lead, "spawn_teammate", name="implementer", description="writes the code", prompt="")
    tool(server, lead, "team_task_create", subject="Survey the parsers", description="What exists?")
    tool(server, lead, "team_task_create", subject="Build the parser", description="tokens and AST", blocked_by=["task-1"])
    inproc_env.manage("shell", "-c", DEMO_HISTORY)
    inproc_env.operator_create("op")
    lead_session = agents(server, lead, "running")
    lead_session.entry("turn_start", turn_id="lead-1", step=0)
    lead_session.entry("assistant_text", turn_id="lead-1", step=0, text="Handing out the next round.")
    impl_token = inproc_env.manage_json("member_token", "demo", "implementer")["token"]
    impl = agents(server, impl_token, "idle")

    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, server, "op", "pw-op")
    open_team(page, server, "demo")
    impl.status("running")
    impl.entry("turn_start", turn_id="impl-1", step=0)
    sent = tool(server, lead, "send_message", target="implementer", message="Start on **task-2** once task-1 is done.")
    steer = impl.recv("steer", where=lambda f: f["message"]["id"] == sent["message_id"])
    impl.entry("user_message", turn_id="impl-1", step=0, text=steer["message"]["content"],
               source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"})
    impl.entry("assistant_text", turn_id="impl-1", step=1, text="Reading the survey first.")
    second = tool(server, lead, "send_message", target="implementer", message="Also handle `unicode`.")
    impl.recv("steer", where=lambda f: f["message"]["id"] == second["message_id"])
    tool(server, lead, "send_message", target="researcher", message="Survey the parsers, please.")
    tool(server, impl_token, "team_task_update", task_id="task-1", expected_revision=1, action="claim")

    impl_lane = page.locator('[data-member="implementer"]')
    expect(impl_lane.locator(f'[data-message-id="{second["message_id"]}"]')).to_have_attribute("data-state", "accepted")
    expect(impl_lane.locator(f'[data-message-id="{sent["message_id"]}"]')).to_have_attribute("data-state", "delivered")
    expect(page.locator('[data-member="researcher"] [data-message-id][data-state="queued"]')).to_have_count(1)
    expect(impl_lane.locator('[data-turn-id="impl-1"]')).to_have_attribute("data-in-progress", "true")
    numbers = page.locator('[data-chart-numbers="team"]')
    expect(numbers.locator('[data-number="p95"]')).not_to_have_text("—")
    expect(page.locator('#team-charts svg[data-chart="latency-percentiles"] [data-clipped="45"]')).not_to_have_count(0)
    page.wait_for_timeout(500)
    screenshot(page, "dashboard-demo")
    _no_horizontal_overflow(page)
    assert page.page_errors == []
