"""In Chromium: an operator makes a team on the team list and rotates its host token on the
team page, each token shown once (issue 33 item 10); a viewer sees neither form, and the
same requests forged from a viewer's page are refused."""
import httpx
import pytest
from playwright.sync_api import expect
from websockets.exceptions import InvalidStatus

from tests.frontend.conftest import login, open_team, page_posts, screenshot, tool, ws_open

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _host_connects(server, token: str) -> bool:
    try:
        ws_open(server.ws_url + "/ws/host/", token).close()
        return True
    except InvalidStatus:
        return False


def test_an_operator_creates_a_team_and_rotates_its_host_token_each_shown_once(inproc_env, served_thread, page):
    server = served_thread
    inproc_env.operator_create("op")
    login(page, server, "op", "pw-op")
    form = page.locator('form[data-action="team-create"]')
    form.get_by_label("New team").fill("made-here")
    form.get_by_role("button", name="Create team").click()
    created = page.locator("[data-created-team]")
    expect(created).to_have_attribute("data-created-team", "made-here")
    lead_token = created.locator("[data-lead-token]").inner_text()
    host_token = created.locator("[data-host-token]").inner_text()
    assert lead_token.startswith("sbm_") and host_token.startswith("sbh_")
    expect(page.locator('[data-team="made-here"]')).to_be_visible()  # on the list at once
    screenshot(page, "team-created")
    # The tokens work: the Lead calls a tool, the host connects.
    assert [a["name"] for a in tool(server, lead_token, "list_agents")["agents"]] == ["lead"]
    assert _host_connects(server, host_token)

    # A name taken: said so, and nothing shown as made.
    form.get_by_label("New team").fill("made-here")
    form.get_by_role("button", name="Create team").click()
    expect(form.locator("[data-team-create-status]")).to_contain_text("already exists")

    # Shown once: the team page never shows it again; rotating gives a new one, once.
    open_team(page, server, "made-here")
    assert host_token not in page.content() and lead_token not in page.content()
    rotate = page.locator('form[data-action="host-token-rotate"]')
    expect(rotate.locator("[data-rotated]")).to_be_hidden()
    rotate.get_by_role("button", name="Rotate host token").click()
    expect(rotate.locator("[data-rotated]")).to_be_visible()
    new_token = rotate.locator("[data-host-token]").inner_text()
    assert new_token.startswith("sbh_") and new_token != host_token
    expect(rotate.locator("[data-host-token-status]")).to_contain_text("rotated")
    assert not _host_connects(server, host_token)
    assert _host_connects(server, new_token)
    page.reload()
    assert new_token not in page.content()
    assert page.page_errors == []


def test_a_viewer_sees_no_team_or_token_forms_and_forged_posts_are_refused(inproc_env, served_thread, page):
    server = served_thread
    team = inproc_env.team_create("watched")
    inproc_env.operator_create("viewer", viewer=True)
    login(page, server, "viewer", "pw-viewer")
    expect(page.locator('[data-team="watched"]')).to_be_visible()
    expect(page.locator('form[data-action="team-create"]')).to_have_count(0)
    open_team(page, server, "watched")
    expect(page.locator('form[data-action="host-token-rotate"]')).to_have_count(0)
    answers = page_posts(page, [("/api/v1/teams", {"name": "forged"}), ("/api/v1/teams/watched/host_token/rotate", None)])
    assert answers == [[403, "FORBIDDEN"]] * 2
    assert _host_connects(server, team["host_token"])  # nothing rotated
    names = [t["team"] for t in httpx.get(f"{server.url}/api/v1/teams",
                                          headers={"Authorization": f"Token {inproc_env.operator_create('op2')['token']}"}).json()["teams"]]
    assert "forged" not in names
