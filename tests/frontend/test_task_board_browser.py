"""In Chromium: the team page's task board words (issue 33 item 7). Blockers are shown only
while they block, and "ready" only on a pending task that nothing blocks."""
import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_team, tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _update(server, token, task_id, action, **fields) -> dict:
    current = tool(server, token, "team_task_get", task_id=task_id)
    revision = current["task"]["revision"]
    return tool(server, token, "team_task_update", task_id=task_id, expected_revision=revision, action=action, **fields)


def test_blockers_show_only_while_they_block_and_ready_only_when_nothing_does(inproc_env, served_thread, page):
    server = served_thread
    lead = inproc_env.team_create("board")["lead"]["token"]
    inproc_env.operator_create("op")
    tool(server, lead, "team_task_create", subject="Build the parser", description="tokens and AST")
    tool(server, lead, "team_task_create", subject="Review the parser", description="Read it.", blocked_by=["task-1"])
    login(page, server, "op", "pw-op")
    open_team(page, server, "board")
    first, second = page.locator('[data-task-id="task-1"]'), page.locator('[data-task-id="task-2"]')

    # Blocked by an open task: not ready, and says by what.
    expect(second).to_have_attribute("data-ready", "false")
    expect(second.locator("[data-blocking]")).to_have_text("blocked by task-1")
    expect(second.locator("[data-ready-label]")).to_have_count(0)
    expect(first.locator("[data-ready-label]")).to_have_count(1)
    expect(first.locator("[data-blocking]")).to_have_count(0)

    # task-1 done: task-2 is ready, and task-1 no longer blocks it.
    _update(server, lead, "task-1", "claim")
    _update(server, lead, "task-1", "complete")
    expect(first).to_have_attribute("data-task-status", "completed")
    expect(second).to_have_attribute("data-ready", "true")
    expect(second.locator("[data-ready-label]")).to_have_count(1)
    expect(second.locator("[data-blocking]")).to_have_count(0)
    expect(second).not_to_contain_text("blocked by")

    # task-2 done as well: a completed task is neither ready nor blocked.
    _update(server, lead, "task-2", "claim")
    _update(server, lead, "task-2", "complete")
    expect(second).to_have_attribute("data-task-status", "completed")
    expect(second.locator("[data-ready-label]")).to_have_count(0)
    expect(second).not_to_contain_text("blocked by")
    # Reopened task-1 blocks again a task that is open, not the completed one.
    _update(server, lead, "task-1", "reopen")
    expect(first).to_have_attribute("data-task-status", "pending")
    expect(second).not_to_contain_text("blocked by")
    # The tools still give every dependency, done or not.
    assert tool(server, lead, "team_task_get", task_id="task-2")["task"]["blocked_by"] == ["task-1"]
    assert page.page_errors == []
