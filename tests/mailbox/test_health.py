"""``/readyz`` during an outage (mailbox/operations/health.py, issue 26): it says what is out of
reach, ``unavailable``, and nothing about where it is; the detail goes to the log."""
import logging

import pytest
from django.db import OperationalError

from mailbox.operations import health
from mailbox.plumbing import outage

pytestmark = pytest.mark.django_db(transaction=True)

# What psycopg says when PostgreSQL is away: the host and port of the database.
REFUSED = 'connection to server at "db.internal.example" (10.9.8.7), port 6543 failed: Connection refused'


async def test_readyz_answers_unavailable_without_the_databases_address_and_logs_it(api, monkeypatch, caplog):
    def refused():
        raise OperationalError(REFUSED)  # the fault, injected where /readyz asks the database

    monkeypatch.setattr(health, "_select_one", refused)
    with caplog.at_level(logging.WARNING, logger="steerboard.outage"):
        response = await api.http.get("/readyz")
    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["status"] == "unavailable"
    assert response.json()["database"] == {"ok": False, "error": "unavailable"}
    for secret in ("db.internal.example", "10.9.8.7", "6543", "OperationalError"):
        assert secret not in response.text
    # The operator finds the detail in the process's log.
    assert "db.internal.example" in caplog.text and "6543" in caplog.text

    monkeypatch.undo()
    back = await api.http.get("/readyz")
    assert back.status_code == 200 and back.json()["database"] == {"ok": True}
    assert outage.database.up


async def test_a_readyz_failure_while_the_database_is_already_known_away_logs_its_detail_in_the_count(
    api, monkeypatch, caplog
):
    # Another caller noticed first (its own line); /readyz's detail rides the periodic count line.
    outage.database.failed("a request", OperationalError("server closed the connection unexpectedly"))
    monkeypatch.setattr(outage, "COUNT_EVERY", 0.0)

    def refused():
        raise OperationalError(REFUSED)

    monkeypatch.setattr(health, "_select_one", refused)
    try:
        with caplog.at_level(logging.WARNING, logger="steerboard.outage"):
            response = await api.http.get("/readyz")
        assert response.json()["database"] == {"ok": False, "error": "unavailable"}
        assert "db.internal.example" not in response.text
        assert "still unreachable" in caplog.text and "db.internal.example" in caplog.text
    finally:
        outage.database.ok()
