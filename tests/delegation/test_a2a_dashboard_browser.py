"""In Chromium: an A2A task shows on the team page as a prompt turn with its author and
task id, and the member's card links its Agent Card."""
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from tests.agents.support import Team
from tests.delegation.support import (
    artifact_texts,
    client_for,
    collect,
    http,
    message,
    task_of,
)
from tests.e2e.test_keyless_cold_resume import spawn_worker
from tests.frontend.conftest import browser, context, login, open_team, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(240)]


def delegate(url: str, token: str, text: str):
    """The a2a-sdk client in a thread of its own (sync Playwright holds this thread's loop)."""

    async def run():
        async with http(token) as h:
            _, client = await client_for(h, url)
            return await collect(client.send_message(message(text)))

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def test_the_team_page_shows_an_a2a_prompt_turn_with_author_and_task_and_links_the_card(
    live_env, daphne_server, page  # noqa: F811
):
    team = Team(live_env, daphne_server, "shown")
    try:
        team.start_host("keyless")
        spawn_worker(team)
        token = live_env.manage_json("a2a_credential", "reviewer", "--team", "shown")["token"]
        events = delegate(f"{daphne_server.url}/a2a/shown/worker", token, "Check the release notes.")
        task = task_of(events)
        assert artifact_texts(events) == ["worker: noted the message from reviewer@a2a."]
        prompt_id = task.metadata["steerboard"]["prompt_id"]

        login(page, daphne_server, "op-shown", "pw-op-shown")
        open_team(page, daphne_server, "shown")
        lane = page.locator('[data-member="worker"]')
        link = lane.locator('[data-a2a-card="worker"]')
        expect(link).to_have_attribute("href", "/a2a/shown/worker/.well-known/agent-card.json")
        asked = lane.locator(f'[data-entry-prompt-id="{prompt_id}"]')
        expect(asked.locator(".entry-kind")).to_have_text(f"prompt from reviewer@a2a · A2A task {task.id}")
        expect(asked).to_have_attribute("data-entry-author", "reviewer@a2a")
        card = json.loads(page.evaluate("async (u) => (await fetch(u)).text()", link.get_attribute("href")))
        assert card["name"] == "shown/worker" and card["capabilities"]["streaming"] is True
        assert page.page_errors == []
    finally:
        team.stop_all()
