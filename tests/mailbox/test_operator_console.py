"""Operator REST for the console (issue 14): message filters, one message's trace, team retry."""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import LeadLogRecord, LogKind, TeamMessage
from mailbox.operations import recovery
from teams.models import Member, Phase
from tests.support.inproc import Agent, person, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def record_kinds(message_id: str) -> list[str]:
    return list(LeadLogRecord.objects.filter(message_id=message_id).order_by("id").values_list("kind", flat=True))


async def _ids(api, headers, query: str = "") -> list[str]:
    response = await api.http.get(f"/api/v1/teams/alpha/messages{query}", headers=headers)
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


async def test_filters_combine_and_page_by_keyset(api):
    team = await team_new()
    coder = await spawn(api, team["lead"], "alpha", "coder")
    await spawn(api, team["lead"], "alpha", "reviewer")
    ops = await person("ops", operator=True)
    agent = Agent(coder)
    await agent.connect("idle")
    sent = {}
    for name, (sender, target, text) in {
        "a": (team["lead"], "coder", "parse the **header**"),
        "b": (team["lead"], "reviewer", "review the header parser"),
        "c": (coder, "reviewer", "header done, please look"),
        "d": (team["lead"], "coder", "then the body"),
    }.items():
        sent[name] = (await api.ok(sender, "send_message", target=target, message=text))["message_id"]
    # The coder has its two messages pushed (accepted); the reviewer has no session (queued).
    assert set(await _ids(api, ops, "?state=accepted")) == {sent["a"], sent["d"]}
    assert set(await _ids(api, ops, "?state=queued")) == {sent["b"], sent["c"]}
    assert await _ids(api, ops, "?sender=coder") == [sent["c"]]
    assert await _ids(api, ops, "?target=coder&q=HEADER") == [sent["a"]]
    assert await _ids(api, ops, "?state=queued&sender=lead&q=header") == [sent["b"]]
    assert await _ids(api, ops, "?state=delivered") == []
    assert await _ids(api, ops, "?sender=nobody") == []

    # Threads: a reply's thread is its root; the filter finds both.
    answer = await api.ok(coder, "send_message", target="lead", message="which body?", reply_to=sent["d"])
    assert set(await _ids(api, ops, f"?thread={sent['d']}")) == {sent["d"], answer["message_id"]}

    # Time bounds on queued_at.
    rows = await database_sync_to_async(lambda: dict(TeamMessage.objects.values_list("pk", "queued_at")))()
    since = rows[sent["c"]].isoformat().replace("+00:00", "Z")
    newer = await _ids(api, ops, f"?since={since}")
    assert sent["c"] in newer and sent["a"] not in newer and sent["b"] not in newer
    older = await _ids(api, ops, f"?until={since}")
    assert set(older) == {sent["a"], sent["b"]}

    # Keyset pages keep the filters: two by two, newest first, nothing twice.
    first = (await api.http.get("/api/v1/teams/alpha/messages?sender=lead&limit=2", headers=ops)).json()
    assert [m["id"] for m in first["messages"]] == [sent["d"], sent["b"]] and first["next_cursor"]
    second = (
        await api.http.get(f"/api/v1/teams/alpha/messages?sender=lead&limit=2&cursor={first['next_cursor']}", headers=ops)
    ).json()
    assert [m["id"] for m in second["messages"]] == [sent["a"]] and second["next_cursor"] is None

    # Bad filters are a 400 with an error code, never a 500.
    for query in ("?state=lost", "?since=yesterday", "?limit=0", f"?q={'x' * 300}"):
        response = await api.http.get(f"/api/v1/teams/alpha/messages{query}", headers=ops)
        assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR", query
    await agent.close()


async def test_the_trace_lists_every_lead_log_event_in_order_with_the_delivering_entry(api):
    team = await team_new()
    coder = await spawn(api, team["lead"], "alpha", "coder")
    ops = await person("ops", operator=True)

    # No session and no host: the send's try finds it waiting (a waiting observation), it stays queued.
    sent = await api.ok(team["lead"], "send_message", target="coder", message="parse it")
    mid = sent["message_id"]
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{mid}", headers=ops)).json()
    assert [e["kind"] for e in trace["events"]] == ["queued", "failed"]
    assert "no host" in trace["events"][1]["error"] and trace["events"][1]["waiting"] is True
    assert trace["state"] == "queued" and trace["attempts"] == 1 and trace["failures"] == 0
    assert "no host" in trace["last_error"]

    # The session connects (admitted in its hello), reports the entry in a turn: delivered.
    agent = Agent(coder)
    await agent.connect("idle")
    await agent.send({"type": "entry", "entry": {"id": "t1", "kind": "turn_start", "turn_id": "turn-1"}})
    await agent.expect("ack")
    await agent.send({"type": "entry", "entry": {
        "id": "m1", "kind": "user_message", "text": "parse it", "step": 0,
        "source": {"kind": "team-message", "message_id": mid, "sender": "lead"},
    }})
    await agent.expect("ack")
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{mid}", headers=ops)).json()
    assert [e["kind"] for e in trace["events"]] == ["queued", "failed", "accepted", "delivered"]
    assert trace["state"] == "delivered" and trace["content"] == "parse it"
    assert trace["events"][0]["since_previous"] is None
    assert all(e["since_previous"] >= 0 for e in trace["events"][1:])
    assert [e["at"] for e in trace["events"]] == sorted(e["at"] for e in trace["events"])
    assert trace["delivered_by"]["entry_id"] == "m1" and trace["delivered_by"]["turn_id"] == "turn-1"

    # A member token reads its own team's traces; an unknown id is a 404 with a code.
    viewer = await person("watcher", operator=False)
    assert (await api.http.get(f"/api/v1/teams/alpha/messages/{mid}", headers=viewer)).status_code == 200
    missing = await api.http.get("/api/v1/teams/alpha/messages/team-message-nope", headers=ops)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    await agent.close()


async def test_a_failed_admission_counts_and_its_error_clears_once_the_message_moves_on(api):
    from mailbox.plumbing import faults

    team = await team_new()
    coder = await spawn(api, team["lead"], "alpha", "coder")
    ops = await person("ops", operator=True)
    agent = Agent(coder)
    await agent.connect("running")
    faults.arm("admission", times=1)
    sent = await api.ok(team["lead"], "send_message", target="coder", message="one")
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{sent['message_id']}", headers=ops)).json()
    assert trace["state"] == "queued" and trace["failures"] == 1 and "injected" in trace["last_error"]
    # Sweeps that find a waiting target count nothing; this one admits it.
    await database_sync_to_async(recovery.messages_recover)()
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{sent['message_id']}", headers=ops)).json()
    assert trace["state"] == "accepted" and trace["last_error"] == "" and trace["failures"] == 1
    assert [e["kind"] for e in trace["events"]] == ["queued", "failed", "accepted"]
    assert "injected" in trace["events"][1]["error"]  # the trace keeps it
    await agent.close()


@database_sync_to_async
def counters(message_id: str) -> dict:
    row = TeamMessage.objects.values("state", "attempts", "failures", "repushes", "last_error").get(pk=message_id)
    failed = LeadLogRecord.objects.filter(message_id=message_id, kind=LogKind.MESSAGE_FAILED).order_by("id")
    return {**row, "failed": [(r["error"], r["waiting"]) for r in failed.values_list("data", flat=True)]}


async def test_sweeps_over_a_message_that_only_waits_count_nothing_and_log_only_a_new_reason(api):
    # Issue 14's "26 attempts for a message that only waited": a target with no session and
    # no host makes every sweep's admission a wait, which is neither an attempt nor a failure
    # (the send's own try is the one attempt, issue 31).
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "coder")
    sent = await api.ok(team["lead"], "send_message", target="coder", message="wait for it")
    mid = sent["message_id"]
    first = await counters(mid)
    assert first["state"] == "queued" and "provisioning and no host" in first["last_error"]
    assert (first["attempts"], first["failures"]) == (1, 0)
    assert len(first["failed"]) == 1 and first["failed"][0][1] is True  # a waiting observation
    for _ in range(5):
        await database_sync_to_async(recovery.messages_recover)()
    assert await counters(mid) == first  # nothing counted, nothing logged: the reason did not change

    # The reason changes (its session came and went: now inactive): one new observation, still no count.
    await database_sync_to_async(
        lambda: Member.objects.filter(team__name="alpha", name="coder").update(phase=Phase.ACTIVE)
    )()
    for _ in range(5):
        await database_sync_to_async(recovery.messages_recover)()
    now = await counters(mid)
    assert (now["state"], now["attempts"], now["failures"], now["repushes"]) == ("queued", 1, 0, 0)
    assert "inactive and no host" in now["last_error"]
    assert [waiting for _, waiting in now["failed"]] == [True, True] and now["failed"][1][0] == now["last_error"]
    ops = await person("ops", operator=True)
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{mid}", headers=ops)).json()
    assert [e["kind"] for e in trace["events"]] == ["queued", "failed", "failed"]
    assert (trace["attempts"], trace["failures"]) == (1, 0)


async def test_team_retry_retries_the_selection_and_refuses_viewers(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "coder")
    await spawn(api, team["lead"], "alpha", "reviewer")
    ops = await person("ops", operator=True)
    viewer = await person("watcher", operator=False)
    ids = [
        (await api.ok(team["lead"], "send_message", target=target, message=f"stuck {i}"))["message_id"]
        for i, target in enumerate(["coder", "coder", "reviewer"])
    ]

    refused = await api.http.post("/api/v1/teams/alpha/retry", headers=viewer)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    assert "team/message/retried" not in await record_kinds(ids[0])

    only_coder = await api.http.post("/api/v1/teams/alpha/retry?target=coder", headers=ops)
    assert only_coder.status_code == 200 and only_coder.json() == {"retried": 2}
    assert (await record_kinds(ids[0])).count("team/message/retried") == 1
    assert "team/message/retried" not in await record_kinds(ids[2])

    everything = await api.http.post("/api/v1/teams/alpha/retry", json={}, headers=ops)
    assert everything.json() == {"retried": 3}
    trace = (await api.http.get(f"/api/v1/teams/alpha/messages/{ids[2]}", headers=ops)).json()
    retried = [e for e in trace["events"] if e["kind"] == "retried"]
    assert len(retried) == 1 and retried[0]["by"] == "ops"

    # Filters in the body work too; delivered messages are never retried.
    assert (await api.http.post("/api/v1/teams/alpha/retry", json={"q": "stuck 2"}, headers=ops)).json() == {"retried": 1}
    assert (await api.http.post("/api/v1/teams/alpha/retry?state=delivered", headers=ops)).json() == {"retried": 0}
    bad = await api.http.post("/api/v1/teams/alpha/retry?state=lost", headers=ops)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("body", ["[1, 2]", '"x"', "null", "7", "true", '[{"target": "coder"}]'])
async def test_team_retry_refuses_a_body_that_is_not_an_object_and_retries_nothing(api, body):
    # Read as "no filters", such a body used to retry every undelivered message of the team.
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "coder")
    ops = await person("ops", operator=True)
    sent = (await api.ok(team["lead"], "send_message", target="coder", message="stuck"))["message_id"]
    json_body = {**ops, "Content-Type": "application/json"}

    refused = await api.http.post("/api/v1/teams/alpha/retry", content=body, headers=json_body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "VALIDATION_ERROR"
    assert "team/message/retried" not in await record_kinds(sent)
    # With filters in the query as well, nothing either.
    refused = await api.http.post("/api/v1/teams/alpha/retry?target=coder", content=body, headers=json_body)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "VALIDATION_ERROR"
    assert "team/message/retried" not in await record_kinds(sent)
    # An empty body, an object, or a form still select as before.
    assert (await api.http.post("/api/v1/teams/alpha/retry", content=b"", headers=json_body)).json() == {"retried": 1}
    assert (await api.http.post("/api/v1/teams/alpha/retry", content="{}", headers=json_body)).json() == {"retried": 1}
    form = await api.http.post("/api/v1/teams/alpha/retry", data={"target": "coder"}, headers=ops)
    assert form.json() == {"retried": 1}
    assert (await record_kinds(sent)).count("team/message/retried") == 3
