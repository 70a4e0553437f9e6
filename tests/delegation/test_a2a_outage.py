"""/a2a while PostgreSQL is away (issue 26, item 5): cards and the JSON-RPC and HTTP+JSON
bindings answer 503 ``SERVICE_UNAVAILABLE`` with Retry-After, as the rest of the server
does (docs/deployment.md), never a 500 or a traceback; once it is back they answer again.

A PostgreSQL cluster and redis-server of the test's own (tests/support/services.py),
stopped for real; tests/delegation/test_a2a_gate.py injects the same failure
in-process on both backends."""
import time

import httpx
import pytest

from tests.support.live import postgres_run_only

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    postgres_run_only("a real PostgreSQL outage"),
]


def calls(server, token: str) -> dict[str, httpx.Response]:
    base = f"{server.url}/a2a/crew/lead"
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    send = {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "hello"}]},
            "configuration": {"returnImmediately": True}}
    with httpx.Client(timeout=30) as http:
        return {
            "member card": http.get(f"{base}/.well-known/agent-card.json"),
            "team card": http.get(f"{server.url}/a2a/crew/.well-known/agent-card.json"),
            "GetTask": http.post(f"{base}/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                    "params": {"id": "t"}}, headers=headers),
            "SendMessage": http.post(f"{base}/", json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
                                                        "params": send}, headers=headers),
            "REST tasks": http.get(f"{base}/rest/tasks", headers=headers),
        }


def test_a2a_answers_503_with_retry_after_while_postgresql_is_stopped_and_serves_again_after(own_database):
    environment, server, pg = own_database
    environment.team_create("crew")
    token = environment.manage_json("a2a_credential", "planner", "--team", "crew")["token"]
    before = calls(server, token)
    assert all(r.status_code == 200 for r in before.values()), {k: r.text[:200] for k, r in before.items()}

    pg.stop("fast")
    try:
        during = calls(server, token)
    finally:
        pg.start()
    for what, response in during.items():
        assert response.status_code == 503, (what, response.status_code, response.text[:300])
        assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE", (what, response.text[:300])
        assert int(response.headers["Retry-After"]) >= 1, what

    deadline = time.monotonic() + 30
    while True:
        after = calls(server, token)
        if all(r.status_code == 200 for r in after.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(r.status_code == 200 for r in after.values()), {k: r.text[:200] for k, r in after.items()}
    log = server.log()
    assert "Traceback" not in log, log[log.find("Traceback") - 300:][:4000]
    assert " 500 " not in log and "SERVER_ERROR" not in log, log[-3000:]
