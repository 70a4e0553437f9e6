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
