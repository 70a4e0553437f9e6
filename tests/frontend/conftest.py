"""Browser fixtures: Debian's Chromium through Playwright (one per test process, a context per
test), agent sessions played with the `websockets` client, and screenshots saved under artifacts/."""
import json
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect


ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


@pytest.fixture
def browser(chromium_session):
    """The test process's one Chromium (tests/conftest.py ``chromium_session``), for this test:
    the contexts it opens are closed after it, and no event loop is left running for the
    asyncio tests after it (tests/support/chromium.py)."""
    with chromium_session.active() as chromium:
        yield chromium


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.set_default_timeout(20_000)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context, request):
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs  # what opened, if anything: the XSS test asserts nothing did
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.page_errors = errors
    yield pg
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        screenshot(pg, f"{request.node.name}-failed")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def login(page, server, username: str, password: str) -> None:
    page.goto(server.url + "/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(server.url + "/")


def open_team(page, server, team: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{server.url}/teams/{team}/")
    expect(page.locator("body")).to_have_attribute("data-connection", "live")


def operator_opens_team(page, environment, server, team: str, viewport: dict | None = None) -> None:
    """A new operator ``op`` (``environment.operator_create``) signed in, on the team's page
    (at ``viewport``'s size, when given)."""
    environment.operator_create("op")
    if viewport:
        page.set_viewport_size(viewport)
    login(page, server, "op", "pw-op")
    open_team(page, server, team)


def page_posts(page, posts: list[tuple[str, dict | None]]) -> list[list]:
    """POST each ``(url, body)`` in turn from the signed-in page, with its session and its CSRF
    token, as the page's own requests go (a forged one, say): each answer's [status, error code]."""
    return page.evaluate(
        """async (posts) => {
            const csrf = document.cookie.split("; ").find((c) => c.startsWith("csrftoken=")).split("=")[1];
            const answers = [];
            for (const [url, body] of posts) {
              const r = await fetch(url, {method: "POST", body: JSON.stringify(body || {}),
                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf}});
              answers.push([r.status, (await r.json()).error.code]);
            }
            return answers;
        }""",
        [[url, body] for url, body in posts],
    )


def open_lane(page, member: str) -> None:
    """Open a member's lane (its summary row is a disclosure): its message columns, charts and
    timeline are shown only then. The page keeps it open across its live re-renders."""
    from playwright.sync_api import expect

    lane = page.locator(f'[data-member="{member}"]')
    if lane.get_attribute("data-expanded") != "true":
        lane.locator(".lane-summary").click()
    expect(lane).to_have_attribute("data-expanded", "true")


def tool(server, token: str, tool_name: str, **arguments) -> dict:
    response = httpx.post(
        f"{server.url}/api/v1/tools/{tool_name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def team_with_coder(environment, server, team: str) -> str:
    """A new team (``environment.team_create``) whose lead spawned ``coder`` without a first
    prompt, nobody running it yet: the lead's token."""
    lead = environment.team_create(team)["lead"]["token"]
    tool(server, lead, "spawn_teammate", name="coder", description="writes the code", prompt="")
    return lead


def ws_open(url: str, token: str):
    """A sync websocket held open across steps of a test (closed by the caller)."""
    return connect(url, additional_headers={"Authorization": f"Bearer {token}"}).__enter__()


class AgentSession:
    """One agent session on /ws/agent/, played by hand, frame by frame."""

    def __init__(self, server, token: str, status: str = "idle"):
        self.ws = ws_open(server.ws_url + "/ws/agent/", token)
        self.send({"type": "hello", "status": status})
        self.welcome = self.recv("welcome")
        self.entries = 0

    def send(self, frame: dict) -> None:
        self.ws.send(json.dumps(frame))

    def recv(self, wanted: str, timeout: float = 20, where=lambda frame: True) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {wanted!r} frame in {timeout}s")
            frame = json.loads(self.ws.recv(timeout=remaining))
            if frame["type"] == wanted and where(frame):
                return frame

    def status(self, status: str) -> None:
        self.send({"type": "status", "status": status})

    def entry(self, kind: str, **fields) -> dict:
        self.entries += 1
        entry_id = fields.pop("id", f"e{self.entries}-{time.monotonic_ns()}")
        self.send({"type": "entry", "entry": {"id": entry_id, "kind": kind, **fields}})
        return self.recv("ack", where=lambda f: f["entry_id"] == entry_id)

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def agents():
    sessions: list[AgentSession] = []

    def start(server, token: str, status: str = "idle") -> AgentSession:
        session = AgentSession(server, token, status)
        sessions.append(session)
        return session

    yield start
    for session in sessions:
        try:
            session.close()
        except Exception:
            pass
