"""config/asgi.py: which HTTP handler a path gets, and what each keeps."""
import httpx
import pytest

from config.asgi import application
from tests.support.inproc import team_new

pytestmark = pytest.mark.django_db(transaction=True)


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
