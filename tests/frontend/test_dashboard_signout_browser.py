"""In Chromium (issue 12, item 14): signing out closes the open dashboard pages' sockets
with 4401 and those pages go to the login page; a signed-out socket is closed with 4401
(not refused with an HTTP 403), which is what sends the page to the login page."""
import re

import pytest
from playwright.sync_api import expect

from tests.frontend.conftest import login, open_team, operator_opens_team, screenshot

pytestmark = [pytest.mark.browser]


@pytest.mark.django_db(transaction=True)
def test_signing_out_in_one_tab_sends_the_other_tabs_to_the_login_page(inproc_env, served_thread, page, context):
    server = served_thread
    inproc_env.team_create("signout")
    operator_opens_team(page, inproc_env, server, "signout")
    team_list = context.new_page()
    team_list.goto(server.url + "/")

    other = context.new_page()
    open_team(other, server, "signout")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(re.compile(r"/login/"))

    # The pages still open got 4401 on their sockets and went to sign in, keeping where they were.
    page.wait_for_url(re.compile(r"/login/\?next=%2Fteams%2Fsignout%2F$"))
    team_list.wait_for_url(re.compile(r"/login/\?next=%2F$"))
    expect(page.get_by_label("Username")).to_be_visible()
    screenshot(page, "signed-out-redirect")


@pytest.mark.django_db(transaction=True)
def test_a_signed_out_socket_is_closed_with_4401(inproc_env, served_thread, page):
    server = served_thread
    inproc_env.team_create("anon")
    page.goto(server.url + "/login/")
    code = page.evaluate(
        """() => new Promise((resolve) => {
            const ws = new WebSocket(`ws://${location.host}/ws/dashboard/anon/`);
            ws.addEventListener("close", (event) => resolve(event.code));
        })"""
    )
    assert code == 4401
    # The same from another origin (port) is refused before the handshake: no 4401, just a failed socket.
    code = page.evaluate(
        """(url) => new Promise((resolve) => {
            const ws = new WebSocket(url);
            ws.addEventListener("close", (event) => resolve(event.code));
        })""",
        server.ws_url.replace("127.0.0.1", "localhost") + "/ws/dashboard/anon/",
    )
    assert code == 1006
