"""Issue 12, item 10: each bearer token's request rate on the agents' API (the tools,
the inbox, the session endpoints), /mcp and the websocket's tool frames is limited
(mailbox/plumbing/quota.py): past it 429 RATE_LIMITED with the limit in the body and Retry-After.
Issue 26: so are a member token's reads of the operator REST (every request with a bearer token)."""
import asyncio

import pytest

from mailbox.models import TeamMessage
from mailbox.plumbing import quota
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _tight_limits(settings):
    # Next to no refill while a test runs, however slow its requests: the burst is what it has.
    settings.STEERBOARD = {**settings.STEERBOARD, "RATE_LIMIT_PER_SECOND": 0.01, "RATE_LIMIT_BURST": 5}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def assert_limited(response, per_second: float = 0.01) -> dict:
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["error"]["code"] == "RATE_LIMITED"
    assert body["limit"] == {"requests_per_second": per_second, "burst": 5}
    assert 0 < body["retry_after"] <= 1 / per_second
    assert int(response.headers["Retry-After"]) >= 1
    return body


def test_the_defaults_are_generous():
    from django.conf import settings

    # The documented defaults (docs/operations.md); bench/common.py raises them for load runs.
    import config.settings as production

    assert production.STEERBOARD["RATE_LIMIT_PER_SECOND"] == 50
    assert production.STEERBOARD["RATE_LIMIT_BURST"] == 300
    assert settings.STEERBOARD["RATE_LIMIT_BURST"] == 5  # this module's own


async def test_a_token_past_its_burst_gets_429_with_the_limit_and_other_tokens_go_on(api, clock):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")  # the Lead's first request
    quota.requests.clear()
    for _ in range(5):
        assert (await api.tool(team["lead"], "list_agents")).status_code == 200
    assert_limited(await api.tool(team["lead"], "list_agents"))
    # A refused send says nothing was stored, and nothing was.
    refused = await api.tool(team["lead"], "send_message", target="implementer", message="hi")
    assert assert_limited(refused)["persisted"] is False
    assert not await asyncio.to_thread(lambda: TeamMessage.objects.filter(content="hi").exists())
    # The Django views of the agents' API count too.
    assert_limited(await api.http.get("/api/v1/inbox", headers=bearer(team["lead"])))
    assert_limited(await api.http.get("/api/v1/session/history", headers=bearer(team["lead"])))
    # Another token has its own budget.
    assert (await api.tool(impl, "list_agents")).status_code == 200
    # The bucket refills at RATE_LIMIT_PER_SECOND: one request in a hundred seconds.
    clock.shift(99)
    assert assert_limited(await api.tool(team["lead"], "list_agents"))["retry_after"] == pytest.approx(1, abs=0.01)
    clock.shift(1)
    assert (await api.tool(team["lead"], "list_agents")).status_code == 200
    assert_limited(await api.tool(team["lead"], "list_agents"))


async def test_mcp_requests_are_limited_per_token(api, settings):
    team = await team_new()
    quota.requests.clear()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {**bearer(team["lead"]), "Accept": "application/json, text/event-stream"}
    for _ in range(5):
        response = await api.http.post("/mcp", json=call, headers=headers)
        assert response.status_code != 429, response.text
    assert_limited(await api.http.post("/mcp", json=call, headers=headers))
    # MCP and REST share the token's budget.
    assert_limited(await api.tool(team["lead"], "list_agents"))


async def test_websocket_tool_frames_share_the_tokens_budget(api):
    team = await team_new()
    quota.requests.clear()
    agent = Agent(team["lead"])
    await agent.connect()
    for i in range(6):
        await agent.send({"type": "tool", "id": f"c{i}", "name": "list_agents", "arguments": {}})
    results = {}
    for _ in range(6):
        frame = await agent.expect("tool_result")
        results[frame["id"]] = frame
    assert all("result" in results[f"c{i}"] for i in range(5))
    assert results["c5"]["error"]["code"] == "RATE_LIMITED" and results["c5"]["limit"]["burst"] == 5
    await agent.send({"type": "tool", "id": "s", "name": "send_message", "arguments": {"target": "x", "message": "y"}})
    refused = await agent.expect("tool_result")
    assert refused["error"]["code"] == "RATE_LIMITED" and refused["persisted"] is False
    # A refused call's entries are stored all the same (as an entries frame before it), and its
    # refusal comes after their answers, carrying their acks.
    await agent.send({"type": "tool", "id": "t", "name": "list_agents", "arguments": {},
                      "entries": [{"id": "before-t", "kind": "tool_call"}]})
    refused = await agent.expect("tool_result")
    assert refused["error"]["code"] == "RATE_LIMITED"
    assert refused["acks"] == [{"entry_id": "before-t", "folded": False}]
    assert_limited(await api.tool(team["lead"], "list_agents"))
    await agent.close()


async def test_member_token_reads_of_the_operator_rest_take_from_the_tokens_bucket(api):
    # A member token reads its own team through the operator REST (mailbox/transports/api/permissions.py):
    # those reads are requests with a bearer token like any other, and share its budget.
    team = await team_new()
    quota.requests.clear()
    reads = {
        "/api/v1/teams/alpha": 200,
        "/api/v1/teams/alpha/messages": 200,
        "/api/v1/teams/alpha/messages?q=parser": 200,
        "/api/v1/teams/alpha/messages/msg-none": 404,
        "/api/v1/teams": 403,  # the team list is the people's: refused, and counted all the same
    }
    for path, status in reads.items():
        response = await api.http.get(path, headers=bearer(team["lead"]))
        assert response.status_code == status, (path, response.text)
    for path in reads:
        assert_limited(await api.http.get(path, headers=bearer(team["lead"])))
    # The same bucket as the agents' API: the tools are refused too.
    assert_limited(await api.tool(team["lead"], "list_agents"))
    # A bearer token that names no member takes from its own bucket as well (before the 401).
    quota.requests.clear()
    for _ in range(5):
        assert (await api.http.get("/api/v1/teams/alpha", headers=bearer("sbm_nobody"))).status_code == 401
    assert_limited(await api.http.get("/api/v1/teams/alpha", headers=bearer("sbm_nobody")))
