"""The gate in front of the A2A SDK (delegation/server.py; issue 26, items 2 and 5), on the
real ASGI application and the test run's database: each token's request rate (a
ListTasks by its page), the cap on prompts waiting for one member, and a database out
of reach answered 503 with Retry-After, as on the other surfaces."""
import django.db
import pytest
from channels.db import database_sync_to_async

from delegation import selectors, server, tasks
from delegation.credentials import credential_create
from delegation.models import DelegatedTask
from mailbox.engine import queue_adapter
from mailbox.models import HumanPrompt
from mailbox.plumbing import outage
from mailbox.plumbing import quota
from tests.delegation.support import A2A_VERSION, rpc, send_params
from tests.support.inproc import spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/a2a/alpha/worker/"


@database_sync_to_async
def credential(name: str) -> str:
    return credential_create(name=name, teams=["alpha"])[1]


@database_sync_to_async
def stored() -> tuple[int, int]:
    return HumanPrompt.objects.count(), DelegatedTask.objects.count()


async def crew(api) -> tuple[dict, str]:
    """Team alpha with a teammate ``worker`` that has no session (its prompts wait), and a credential."""
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "worker")
    return team, await credential("planner")


def limited(response, *, burst: int) -> dict:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    body = response.json()
    assert body["error"]["code"] == "RATE_LIMITED"
    assert body["limit"]["burst"] == burst
    return body


@pytest.fixture
def tight_rate(settings):
    quota.requests.clear()
    # Next to no refill while a test runs: the burst is what a token has.
    settings.STEERBOARD = {**settings.STEERBOARD, "RATE_LIMIT_PER_SECOND": 0.01, "RATE_LIMIT_BURST": 5}
    yield
    quota.requests.clear()


async def test_a2a_requests_count_against_their_tokens_rate_and_past_it_get_429(api, tight_rate):
    _, token = await crew(api)
    other = await credential("scout")
    for _ in range(5):
        answered = await rpc(api.http, token, "GetTask", {"id": "nope"}, path=PATH)
        assert answered.status_code == 200 and answered.json()["error"]["code"] == -32001, answered.text  # not found
    limited(await rpc(api.http, token, "GetTask", {"id": "nope"}, path=PATH), burst=5)
    # Both bindings, and streams, share the token's bucket.
    headers = {**A2A_VERSION, "Authorization": f"Bearer {token}"}
    limited(await api.http.get(PATH + "rest/tasks", headers=headers), burst=5)
    limited(await rpc(api.http, token, "SendStreamingMessage", send_params("hi"), path=PATH), burst=5)
    assert await stored() == (0, 0)
    # Another credential has a bucket of its own; a card needs no token and costs none.
    assert (await rpc(api.http, other, "GetTask", {"id": "nope"}, path=PATH)).status_code == 200
    assert (await api.http.get(PATH + ".well-known/agent-card.json")).status_code == 200


async def test_a_list_of_tasks_counts_one_request_per_ten_tasks_of_its_page(api, settings):
    quota.requests.clear()
    settings.STEERBOARD = {**settings.STEERBOARD, "RATE_LIMIT_PER_SECOND": 0.01, "RATE_LIMIT_BURST": 25}
    _, token = await crew(api)
    for _ in range(2):  # ten each
        listed = await rpc(api.http, token, "ListTasks", {"pageSize": 100}, path=PATH)
        assert listed.status_code == 200 and listed.json()["result"]["tasks"] == [], listed.text
    limited(await rpc(api.http, token, "ListTasks", {"pageSize": 100}, path=PATH), burst=25)
    # The refused one took only its own first unit: a page of ten (one) still fits.
    assert (await rpc(api.http, token, "ListTasks", {"pageSize": 10}, path=PATH)).status_code == 200
    quota.requests.clear()


async def test_prompts_waiting_for_one_member_are_capped_and_the_one_past_the_cap_stores_nothing(api, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_QUEUED_PROMPTS_PER_MEMBER": 3}
    _, token = await crew(api)
    task_ids = []
    for n in range(3):
        sent = await rpc(api.http, token, "SendMessage", send_params(f"job {n}", message_id=f"m{n}"), path=PATH)
        task_ids.append(sent.json()["result"]["task"]["id"])
    assert await stored() == (3, 3)
    headers = {**A2A_VERSION, "Authorization": f"Bearer {token}"}
    for refused in (
        await rpc(api.http, token, "SendMessage", send_params("one too many"), path=PATH),
        await rpc(api.http, token, "SendStreamingMessage", send_params("one too many"), path=PATH),
        await api.http.post(PATH + "rest/message:send", json=send_params("one too many"), headers=headers),
    ):
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "PROMPT_QUEUE_FULL"
        assert refused.json()["limit"] == 3
    assert await stored() == (3, 3)
    # A withdrawn prompt no longer waits: its place is free again.
    canceled = await rpc(api.http, token, "CancelTask", {"id": task_ids[0]}, path=PATH)
    assert canceled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled.text
    again = await rpc(api.http, token, "SendMessage", send_params("room now"), path=PATH)
    assert again.json()["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED", again.text


@pytest.fixture
def database_away(monkeypatch):
    """Inject the failure a lost PostgreSQL connection raises (Django's own OperationalError)."""

    def away(*args, **kwargs):
        raise django.db.OperationalError("server closed the connection unexpectedly")

    yield lambda target, name: monkeypatch.setattr(target, name, away)
    monkeypatch.undo()
    outage.database.ok()  # the next test finds it reachable


def unavailable(response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE", response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "server closed" not in response.text  # nothing of the database's own text


async def test_a_database_out_of_reach_at_the_gate_answers_503_with_retry_after_not_500(api, database_away):
    _, token = await crew(api)
    headers = {**A2A_VERSION, "Authorization": f"Bearer {token}"}
    database_away(selectors, "member_of_path")
    unavailable(await api.http.get(PATH + ".well-known/agent-card.json"))
    database_away(selectors, "lead_of_team")
    unavailable(await api.http.get("/a2a/alpha/.well-known/agent-card.json"))
    database_away(server, "_authenticated")
    unavailable(await rpc(api.http, token, "GetTask", {"id": "t"}, path=PATH))
    unavailable(await rpc(api.http, token, "SendMessage", send_params("during"), path=PATH))
    unavailable(await api.http.get(PATH + "rest/tasks/t", headers=headers))
    assert await stored() == (0, 0)


async def test_a_database_out_of_reach_inside_a_method_answers_503_in_place_of_the_sdks_answer(api, database_away):
    _, token = await crew(api)
    headers = {**A2A_VERSION, "Authorization": f"Bearer {token}"}
    sent = await rpc(api.http, token, "SendMessage", send_params("before"), path=PATH)
    task_id = sent.json()["result"]["task"]["id"]
    database_away(tasks, "task_of_caller")
    unavailable(await rpc(api.http, token, "GetTask", {"id": task_id}, path=PATH))
    unavailable(await api.http.get(PATH + f"rest/tasks/{task_id}", headers=headers))
    unavailable(await rpc(api.http, token, "SubscribeToTask", {"id": task_id}, path=PATH))
    unavailable(await rpc(api.http, token, "CancelTask", {"id": task_id}, path=PATH))
    database_away(tasks, "tasks_of_caller")
    unavailable(await rpc(api.http, token, "ListTasks", {}, path=PATH))
    database_away(queue_adapter, "prompt_store")
    unavailable(await rpc(api.http, token, "SendMessage", send_params("during"), path=PATH))
    unavailable(await api.http.post(PATH + "rest/message:send", json=send_params("during"), headers=headers))
    assert await stored() == (1, 1)  # only the message sent before
