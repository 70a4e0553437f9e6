"""``GET /metrics`` (mailbox/plumbing/metrics.py, issue 29 item 1): after a team's sends through the
real application (REST and websocket tool calls, deliveries by websocket entries, an
operator's cancel), the counters agree with the team's Lead log and the gauges with its
mailbox; only an operator's token or an allowed address may scrape."""
import pytest
from channels.db import database_sync_to_async
from prometheus_client.parser import text_string_to_metric_families

from mailbox.models import PENDING_STATES, LeadLogRecord, TeamMessage
from mailbox.plumbing import metrics
from tests.support.inproc import Agent, person, spawn, team_new, token_for

pytestmark = pytest.mark.django_db(transaction=True)


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(found: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and all((k, labels[k]) in ls for k in labels))


@database_sync_to_async
def log_counts(team: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in LeadLogRecord.objects.filter(team__name=team, message__isnull=False).values_list("kind", flat=True):
        state = metrics.STATE_OF_KIND[kind]
        counts[state] = counts.get(state, 0) + 1
    return counts


@database_sync_to_async
def pending(team: str) -> int:
    return TeamMessage.objects.filter(team__name=team, state__in=PENDING_STATES).count()


async def test_after_a_teams_sends_the_counters_match_its_lead_log(api):
    team = await team_new()
    ops = await person("ops", True)
    await spawn(api, team["lead"], "alpha", "impl", prompt="start here")
    await spawn(api, team["lead"], "alpha", "idler")  # no session: what is sent to it waits
    impl = Agent(await token_for("alpha", "impl"))
    await impl.connect("idle")
    await impl.integrate((await impl.expect("steer"))["message"])  # the spawn prompt, replayed on hello
    lead = Agent(team["lead"])
    await lead.connect("running")

    sent = []
    for i in range(6):  # through REST
        sent.append((await api.ok(team["lead"], "send_message", target="impl", message=f"rest {i}"))["message_id"])
    for i in range(4):  # as websocket tool frames
        await lead.send({"type": "tool", "id": f"call-{i}", "name": "send_message",
                         "arguments": {"target": "impl", "message": f"ws {i}"}})
        result = await lead.expect("tool_result")
        sent.append(result["result"]["message_id"])
    for _ in sent:
        await impl.integrate((await impl.expect("steer"))["message"])
    waiting = [(await api.ok(team["lead"], "send_message", target="idler", message=f"later {i}"))["message_id"]
               for i in range(3)]
    cancelled = await api.http.post(f"/api/v1/teams/alpha/messages/{waiting[0]}/cancel", headers=ops)
    assert cancelled.status_code == 200, cancelled.text
    refused = await api.tool(team["lead"], "send_message", target="nobody", message="x")
    assert refused.status_code == 404

    response = await api.http.get("/metrics", headers=ops)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)

    logged = await log_counts("alpha")
    assert logged["queued"] == 1 + 10 + 3 and logged["delivered"] == 11 and logged["cancelled"] == 1
    for state in metrics.STATE_OF_KIND.values():
        assert total(found, "steerboard_message_transitions_total", team="alpha", state=state) == logged.get(state, 0), state
    assert total(found, "steerboard_messages_sent_total", team="alpha") == logged["queued"]
    assert total(found, "steerboard_messages_sent_total", team="alpha", transport="ws") == 4
    assert total(found, "steerboard_messages_sent_total", team="alpha", transport="rest") == 1 + 6 + 3

    assert total(found, "steerboard_undelivered_messages", team="alpha") == await pending("alpha") == 2
    assert total(found, "steerboard_oldest_undelivered_age_seconds", team="alpha") > 0
    assert total(found, "steerboard_sessions_connected", team="alpha") == 2
    assert total(found, "steerboard_hosts_connected", team="alpha") == 0
    assert total(found, "steerboard_members", team="alpha") == 3
    assert total(found, "steerboard_members", team="alpha", status="idle") == 1

    assert total(found, "steerboard_tool_calls_total", tool="send_message", outcome="ok") == 13
    assert total(found, "steerboard_tool_calls_total", tool="send_message", outcome="refused") == 1
    assert total(found, "steerboard_refusals_total", code="TEAM_UNKNOWN_TARGET") == 1
    assert total(found, "steerboard_send_to_delivered_seconds_count") == 11
    assert total(found, "steerboard_send_to_accepted_seconds_count") == logged["accepted"]
    assert total(found, "steerboard_writer_batch_size_count") >= 1
    assert total(found, "steerboard_writer_commit_seconds_count") >= 1
    assert any(name == "process_cpu_seconds_total" for name, _ in found)
    # Low cardinality: no message or member id in any label.
    label_values = {value for _, labels in found for _, value in labels}
    assert not {"impl", "idler", "lead", *sent, *waiting} & label_values
    await impl.close()
    await lead.close()


async def test_only_an_operator_token_or_an_allowed_address_may_scrape(api, settings):
    viewer = await person("viewer", False)
    nobody = await api.http.get("/metrics")
    assert nobody.status_code == 401 and nobody.json()["error"]["code"] == "UNAUTHENTICATED"
    assert (await api.http.get("/metrics", headers=viewer)).status_code == 401
    assert (await api.http.get("/metrics", headers={"Authorization": "Token \ud800"[:6]})).status_code == 401
    # httpx's ASGI transport asks from 127.0.0.1.
    settings.STEERBOARD = {**settings.STEERBOARD, "METRICS_ALLOW": ("10.0.0.0/8",)}
    assert (await api.http.get("/metrics")).status_code == 401
    settings.STEERBOARD = {**settings.STEERBOARD, "METRICS_ALLOW": ("127.0.0.0/8",)}
    allowed = await api.http.get("/metrics")
    assert allowed.status_code == 200 and "steerboard_writer_batch_size_bucket" in allowed.text
    settings.STEERBOARD = {**settings.STEERBOARD, "METRICS": False}
    off = await api.http.get("/metrics")
    assert off.status_code == 404 and off.json()["error"]["code"] == "NOT_FOUND"


def test_the_server_scraped_over_its_socket_from_an_allowed_address_agrees_with_its_database(
        inproc_env, served_thread, settings):
    """The application served on a real socket (in a thread of this process): N sends and their
    deliveries over REST, scraped by an address STEERBOARD_METRICS_ALLOW lists (the scraper's
    own, 127.0.0.1, as the server sees it on the connection); its counters are the database's
    Lead log."""
    import httpx

    settings.STEERBOARD = {**settings.STEERBOARD, "METRICS_ALLOW": ("127.0.0.1",)}
    team = inproc_env.team_create("metered")
    lead = {"Authorization": f"Bearer {team['lead']['token']}"}
    with httpx.Client(base_url=served_thread.url, timeout=10) as http:
        spawned = http.post("/api/v1/tools/spawn_teammate", headers=lead,
                            json={"name": "impl", "description": "d", "prompt": ""})
        assert spawned.status_code == 200, spawned.text
        impl = {"Authorization": f"Bearer {inproc_env.manage_json('member_token', 'metered', 'impl')['token']}"}
        n = 25
        for i in range(n):
            sent = http.post("/api/v1/tools/send_message", headers=lead, json={"target": "impl", "message": f"m{i}"})
            assert sent.status_code == 200, sent.text
        inbox = http.get("/api/v1/inbox?limit=10", headers=impl).json()["messages"]
        entries = [{"id": f"e-{m['id']}", "kind": "user_message", "text": m["content"],
                    "source": {"kind": "team-message", "message_id": m["id"]}} for m in inbox]
        assert http.post("/api/v1/session/entries", headers=impl, json={"entries": entries}).status_code == 200
        scraped = http.get("/metrics")
    assert scraped.status_code == 200, scraped.text
    found = samples(scraped.text)
    logged = dict(inproc_env.query(
        "SELECT kind, COUNT(*) FROM mailbox_leadlogrecord WHERE message_id IS NOT NULL GROUP BY kind"
    ))
    for kind, state in metrics.STATE_OF_KIND.items():
        assert total(found, "steerboard_message_transitions_total", team="metered", state=state) == logged.get(kind, 0)
    assert logged["team/message/queued"] == n and logged["team/message/delivered"] == 10
    assert total(found, "steerboard_messages_sent_total", team="metered", transport="rest") == n
    assert total(found, "steerboard_undelivered_messages", team="metered") == n - 10
    assert total(found, "steerboard_send_to_delivered_seconds_count") == 10
