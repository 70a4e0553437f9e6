"""In Chromium: an A2A task shows on the team page as a prompt turn with its author and
task id, and the member's card links its Agent Card. Against the application served
in-process, the worker run by the SDK's host (keyless model) in a thread of this process."""
import asyncio
import contextlib
import json
import threading
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

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]


@contextlib.contextmanager
def keyless_host(url: str, host_token: str):
    """``python -m steerboard_agents host --model keyless``'s Host, on an event loop of its own in
    a thread of this process (the test's thread is the browser's), stopped on the way out."""
    from steerboard_agents import Host
    from steerboard_agents.registry import model_factory

    host = Host(url, host_token, model_factory("keyless"), max_backoff=0.3)
    loop = asyncio.new_event_loop()
    task = loop.create_task(host.run())

    def run() -> None:
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        left = asyncio.all_tasks(loop)  # what the host's websockets left (their keepalives)
        for each in left:
            each.cancel()
        if left:  # gather() of nothing looks for this thread's current loop, and it has none
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, name="keyless-host", daemon=True)
    thread.start()
    try:
        yield host
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(30)


def delegate(url: str, token: str, text: str):
    """The a2a-sdk client in a thread of its own (sync Playwright holds this thread's loop)."""

    async def run():
        async with http(token) as h:
            _, client = await client_for(h, url)
            return await collect(client.send_message(message(text)))

    pool = ThreadPoolExecutor(1)
    try:  # bounded: a call that never ends fails the test, not the run (no waiting for its thread)
        return pool.submit(asyncio.run, run()).result(timeout=120)
    finally:
        pool.shutdown(wait=False)


def test_the_team_page_shows_an_a2a_prompt_turn_with_author_and_task_and_links_the_card(
    inproc_env, served_thread, page  # noqa: F811
):
    server = served_thread
    team = Team(inproc_env, server, "shown")
    with keyless_host(server.url, team.host_token):
        spawn_worker(team)
        token = inproc_env.manage_json("a2a_credential", "reviewer", "--team", "shown")["token"]
        events = delegate(f"{server.url}/a2a/shown/worker", token, "Check the release notes.")
        task = task_of(events)
        assert artifact_texts(events) == ["worker: noted the message from reviewer@a2a."]
        prompt_id = task.metadata["steerboard"]["prompt_id"]

        login(page, server, "op-shown", "pw-op-shown")
        open_team(page, server, "shown")
        lane = page.locator('[data-member="worker"]')
        link = lane.locator('[data-a2a-card="worker"]')
        expect(link).to_have_attribute("href", "/a2a/shown/worker/.well-known/agent-card.json")
        asked = lane.locator(f'[data-entry-prompt-id="{prompt_id}"]')
        expect(asked.locator(".entry-kind")).to_have_text(f"prompt from reviewer@a2a · A2A task {task.id}")
        expect(asked).to_have_attribute("data-entry-author", "reviewer@a2a")
        card = json.loads(page.evaluate("async (u) => (await fetch(u)).text()", link.get_attribute("href")))
        assert card["name"] == "shown/worker" and card["capabilities"]["streaming"] is True
        assert page.page_errors == []
