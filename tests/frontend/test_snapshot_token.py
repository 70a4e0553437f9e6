"""teams/<team>/snapshot.json for scripts: an operator token (``Authorization: Token``) reads
what the dashboard reads; a wrong one gets a 401 JSON error, never the login page; a
browser keeps its session. Through the real ASGI application (tests/support/inproc.py)."""
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User

from accounts.tokens import operator_tokens_revoke
from tests.support.inproc import operator_token, team_new

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/teams/alpha/snapshot.json"


async def test_an_operator_token_reads_the_snapshot(api):
    await team_new()
    token = await operator_token("ops", operator=True)
    response = await api.http.get(URL, headers={"Authorization": f"Token {token}"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["me"] == {"username": "ops", "role": "operator", "can_act": True}
    assert [m["name"] for m in body["members"]] == ["lead"]
    assert "no-cache" in response.headers["cache-control"]

    viewer = await operator_token("watcher", operator=False)  # a viewer's token reads, as its login would
    seen = await api.http.get(URL, headers={"Authorization": f"Token {viewer}"})
    assert seen.status_code == 200 and seen.json()["me"]["role"] == "viewer"


@pytest.mark.parametrize(
    "header",
    ["Token sbo_not-a-token", "Token", "Token a b", "Bearer sbo_x", "Basic b3BzOnB3"],
)
async def test_a_wrong_credential_gets_401_json_not_the_login_page(api, header):
    await team_new()
    response = await api.http.get(URL, headers={"Authorization": header})
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    assert "location" not in response.headers


async def test_a_revoked_token_is_refused(api):
    await team_new()
    token = await operator_token("ops", operator=True)
    await database_sync_to_async(lambda: operator_tokens_revoke(user=User.objects.get(username="ops")))()
    response = await api.http.get(URL, headers={"Authorization": f"Token {token}"})
    assert response.status_code == 401


async def test_a_browser_still_uses_its_session(api):
    await team_new()
    await operator_token("ops", operator=True)
    anonymous = await api.http.get(URL)
    assert anonymous.status_code == 302 and anonymous.headers["location"].startswith("/login/")

    login = await api.http.get("/login/")
    csrf = api.http.cookies["csrftoken"]
    signed_in = await api.http.post(
        "/login/", data={"username": "ops", "password": "pw", "csrfmiddlewaretoken": csrf},
        headers={"Referer": "http://testserver/login/"},
    )
    assert login.status_code == 200 and signed_in.status_code == 302, signed_in.text
    response = await api.http.get(URL)
    assert response.status_code == 200 and response.json()["me"]["username"] == "ops"


async def test_an_unknown_team_with_a_token_is_a_json_404(api):
    token = await operator_token("ops", operator=True)
    response = await api.http.get("/teams/nope/snapshot.json", headers={"Authorization": f"Token {token}"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"
