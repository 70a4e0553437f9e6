"""GET /api/v1/tools/policy: the team policy; POST to that path stays a tool call."""
import pytest

from tests.support.inproc import team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_policy_names_the_rules_hosts_put_into_instructions(api):
    response = await api.http.get("/api/v1/tools/policy")
    assert response.status_code == 200
    body = response.json()
    assert body["version"] == 1
    ids = [r["id"] for r in body["rules"]]
    assert {"task-workflow", "send-once", "integrate-steer", "lead-waits"} <= set(ids)
    text = body["policy"]
    for phrase in ["team_task_list", "team_task_get", "claim", "complete", "never resend",
                   "without dropping the work in progress", "The Lead waits"]:
        assert phrase in text, phrase


async def test_posting_to_the_policy_path_is_still_a_tool_call(api):
    team = await team_new()
    response = await api.tool(team["lead"], "policy")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"
    unauthenticated = await api.tool(None, "policy")
    assert unauthenticated.status_code == 401
    # And the real tools are where they were.
    assert (await api.http.get("/api/v1/tools/send_message")).status_code == 405
    assert len((await api.http.get("/api/v1/tools")).json()) == 10
