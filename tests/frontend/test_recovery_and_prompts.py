"""Messages that wait for a session, operators' retries, and human prompts as their own turns."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_lane, open_team, screenshot, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _inactive_teammate(inproc_env, server, agents, team: str, lead: str) -> None:
    tool(server, lead, "spawn_teammate", name="reviewer", description="reviews", prompt="")
    token = inproc_env.manage_json("member_token", team, "reviewer")["token"]
    agents(server, token, "idle").close()  # it ran once and left: inactive, and no host to resume it


def test_message_to_inactive_member_without_host_waits_queued_until_a_session_connects(
    inproc_env, served_thread, page, agents
):
    server = served_thread
    team = inproc_env.team_create("beta")
    lead = team["lead"]["token"]
    inproc_env.operator_create("op")
    _inactive_teammate(inproc_env, server, agents, "beta", lead)
    login(page, server, "op", "pw-op")
    open_team(page, server, "beta")
    lane = page.locator('[data-member="reviewer"]')
    expect(lane).to_have_attribute("data-status", "inactive")

    sent = tool(server, lead, "send_message", target="reviewer", message="Please review task-1.")
    assert sent["status"] == "queued"
    message = lane.locator(f'[data-message-id="{sent["message_id"]}"]')
    expect(message).to_have_attribute("data-state", "queued")
    expect(lane.locator('[data-column="queued"] [data-count="queued"]')).to_have_text("1")

    # The operator retries: admission runs again and says why it cannot go anywhere yet.
    open_lane(page, "reviewer")
    message.locator('[data-action="retry"]').click()
    expect(message.locator(".last-error")).to_contain_text("no host is connected")
    expect(message).to_have_attribute("data-state", "queued")
    lane.locator('[data-action="retry-all"]').click()
    expect(message).to_have_attribute("data-state", "queued")
    screenshot(page, "inactive-1-queued")

    # A session connects: the message is replayed to it, and delivered once it is in the history.
    token = inproc_env.manage_json("member_token", "beta", "reviewer")["token"]
    session = agents(server, token, "idle")
    steer = session.recv("steer")
    assert steer["message"]["id"] == sent["message_id"]
    expect(lane).to_have_attribute("data-status", "idle")
    expect(message).to_have_attribute("data-state", "accepted")
    session.status("running")
    session.entry("turn_start", turn_id="r-1", step=0)
    session.entry(
        "user_message",
        turn_id="r-1",
        step=0,
        text=steer["message"]["content"],
        source={"kind": "team-message", "message_id": sent["message_id"], "sender": "lead"},
    )
    expect(message).to_have_attribute("data-state", "delivered")
    expect(message.locator('[data-action="retry"]')).to_have_count(0)
    expect(lane.locator('[data-action="retry-all"]')).to_have_count(0)
    expect(lane.locator('[data-turn-id="r-1"] [data-entry-message-id]')).to_have_attribute(
        "data-entry-message-id", sent["message_id"]
    )
    screenshot(page, "inactive-2-delivered")


def test_operator_prompt_to_running_member_waits_queued_then_runs_as_its_own_turn(
    inproc_env, served_thread, page, agents
):
    server = served_thread
    team = inproc_env.team_create("gamma")
    lead = team["lead"]["token"]
    inproc_env.operator_create("op")
    session = agents(server, lead, "idle")
    session.status("running")
    session.entry("turn_start", turn_id="work-1", step=0)
    session.entry("assistant_text", turn_id="work-1", step=0, text="Planning the release.")

    login(page, server, "op", "pw-op")
    open_team(page, server, "gamma")
    lane = page.locator('[data-member="lead"]')
    expect(lane).to_have_attribute("data-status", "running")
    expect(lane.locator("[data-current-turn]")).to_have_attribute("data-current-turn", "work-1")

    form = page.locator('form[data-action="prompt"]')
    form.locator('select[name="target"]').select_option("lead")
    form.locator('textarea[name="content"]').fill("Summarise what changed today.")
    form.get_by_role("button", name="Send prompt").click()
    prompt = lane.locator("[data-prompt-id][data-state]").filter(has_text="Summarise what changed today.")
    expect(prompt).to_have_attribute("data-state", "queued")
    prompt_id = prompt.get_attribute("data-prompt-id")
    screenshot(page, "prompt-1-queued")

    # The running turn goes on undisturbed; the prompt is offered only once it ends.
    session.entry("assistant_text", turn_id="work-1", step=1, text="Release notes drafted.")
    session.entry("turn_end", turn_id="work-1", step=1)
    session.status("idle")
    pushed = session.recv("prompt")
    assert pushed["prompt"]["id"] == prompt_id
    assert pushed["prompt"]["content"] == "Summarise what changed today."

    session.status("running")
    session.entry("turn_start", turn_id="prompt-turn", step=0)
    session.entry("prompt", turn_id="prompt-turn", step=0, prompt_id=prompt_id, text=pushed["prompt"]["content"])
    expect(prompt).to_have_attribute("data-state", "started")
    session.entry("assistant_text", turn_id="prompt-turn", step=0, text="Today: the parser landed.")
    session.entry("turn_end", turn_id="prompt-turn", step=0)
    session.status("idle")

    own_turn = lane.locator('[data-turn-kind="prompt"]')
    expect(own_turn).to_have_attribute("data-prompt-id", prompt_id)
    expect(own_turn).to_have_attribute("data-turn-id", "prompt-turn")
    expect(own_turn).to_have_attribute("data-ended", "true")
    expect(own_turn.locator('[data-entry-kind="prompt"]')).to_contain_text("Summarise what changed today.")
    first_turn = lane.locator('[data-turn-id="work-1"]')
    expect(first_turn).to_have_attribute("data-turn-kind", "turn")
    expect(first_turn.locator('[data-entry-kind="prompt"]')).to_have_count(0)
    expect(prompt).to_have_count(0)  # completed: it is the turn now, no longer a waiting prompt
    expect(lane).to_have_attribute("data-status", "idle")
    screenshot(page, "prompt-2-own-turn")
