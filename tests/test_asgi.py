"""config/asgi.py: which HTTP handler a path gets, and what each keeps."""
import asyncio
import importlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import config.asgi as asgi_module
from config.asgi import application
from tests.support.inproc import team_new

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent


def _client(host: str = "testserver") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url=f"http://{host}")


async def test_the_agents_api_keeps_the_security_headers_without_the_browser_middleware():
    team = await team_new()
    async with _client() as client:
        response = await client.post(
            "/api/v1/tools/list_agents", json={}, headers={"Authorization": f"Bearer {team['lead']}"}
        )
    assert response.status_code == 200
    assert response.json()["agents"][0]["name"] == "lead"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"
    assert "set-cookie" not in response.headers  # no session, no CSRF cookie on a bearer API


async def test_the_agents_api_refuses_a_host_that_is_not_allowed():
    team = await team_new()
    async with _client("evil.example") as client:
        response = await client.post(
            "/api/v1/tools/list_agents", json={}, headers={"Authorization": f"Bearer {team['lead']}"}
        )
    assert response.status_code == 400


async def test_browser_pages_still_go_through_the_middleware():
    async with _client() as client:
        response = await client.get("/login/")
    assert response.status_code == 200
    assert "csrftoken" in response.cookies  # CsrfViewMiddleware ran
    assert response.headers["x-frame-options"] == "DENY"


async def test_an_unknown_agent_api_path_is_a_json_404():
    async with _client() as client:
        response = await client.get("/api/v1/toolsbox")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


async def test_a_tool_call_is_answered_without_django_and_keeps_its_refusals():
    team = await team_new()
    async with _client() as client:
        too_big = await client.post(
            "/api/v1/tools/send_message",
            content=b'{"target": "lead", "message": "' + b"x" * (3 * 1024 * 1024) + b'"}',
            headers={"Authorization": f"Bearer {team['lead']}"},
        )
        unknown = await client.post("/api/v1/tools/no_such_tool", json={}, headers={"Authorization": f"Bearer {team['lead']}"})
        no_token = await client.post("/api/v1/tools/list_agents", json={})
        wrong_method = await client.get("/api/v1/tools/list_agents", headers={"Authorization": f"Bearer {team['lead']}"})
    assert too_big.status_code == 413
    assert too_big.json() == {"error": {"code": "TEAM_MESSAGE_TOO_LARGE", "message": "The request body is too large."},
                              "persisted": False}
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NOT_FOUND"
    assert no_token.status_code == 401 and no_token.json()["error"]["code"] == "UNAUTHENTICATED"
    assert wrong_method.status_code == 405  # every method but POST is still Django's view
    for response in (too_big, unknown, no_token):
        assert response.headers["x-content-type-options"] == "nosniff"


async def test_the_sql_counts_are_not_served_unless_asked_for():
    async with _client() as client:
        response = await client.get("/api/v1/debug/sql")
    assert response.status_code == 404


def test_starting_the_application_does_not_import_the_mcp_and_a2a_sdks():
    # A fresh interpreter: this one's test modules may have imported them already.
    probe = (
        "import sys, config.asgi; "
        "print(sorted(m for m in ('mcp', 'a2a', 'mailbox.transports.mcp_server', 'delegation.server') if m in sys.modules))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


async def test_requests_that_come_while_a_deferred_app_loads_wait_for_one_import(monkeypatch):
    imported, real_import = [], importlib.import_module

    def counted_import(name):
        imported.append(name)
        return real_import(name)

    monkeypatch.setattr(asgi_module.importlib, "import_module", counted_import)
    deferred = asgi_module.Deferred("tests.support.inproc", "team_new")
    first, second = await asyncio.gather(deferred._load(), deferred._load())
    assert first is second is team_new
    assert imported == ["tests.support.inproc"]


async def test_a_deferred_app_whose_import_failed_is_tried_again():
    deferred = asgi_module.Deferred("tests.support.no_such_module", "app")
    for _ in range(2):
        with pytest.raises(ModuleNotFoundError):
            await deferred._load()
    assert deferred._loading is None


async def test_mcp_and_a2a_are_served_through_their_deferred_apps():
    async with _client() as client:
        mcp = await client.get("/mcp")
        a2a = await client.get("/a2a/")
    assert mcp.status_code == 405 and mcp.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert a2a.status_code == 404 and a2a.json()["error"]["code"] == "NOT_FOUND"
