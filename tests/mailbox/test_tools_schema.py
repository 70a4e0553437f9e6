"""GET /api/v1/tools: the ten tools, their schemas generated from the pydantic models.

The snapshot pins the wire contract. After a deliberate schema change,
regenerate it with:

    STEERBOARD_UPDATE_SNAPSHOTS=1 python -m pytest tests/mailbox/test_tools_schema.py

and review the diff of tests/mailbox/snapshots/tools.json like any contract change.
"""
import json
import os
from pathlib import Path

import pytest
from steerboard_protocol.tools import TEAM_TOOLS

SNAPSHOT = Path(__file__).parent / "snapshots" / "tools.json"


@pytest.mark.django_db
def test_tools_list_matches_the_snapshot(client):
    response = client.get("/api/v1/tools")
    assert response.status_code == 200
    tools = response.json()
    # The names and their order are the contract's (steerboard_protocol.tools, which the server checks its
    # registry against at start); the snapshot pins them as docs/protocol.md writes them.
    assert [t["name"] for t in tools] == list(TEAM_TOOLS) and len(TEAM_TOOLS) == 10
    for tool in tools:
        assert set(tool) == {"name", "description", "input_schema", "output_schema"}
        assert tool["input_schema"]["type"] == "object"
    if os.environ.get("STEERBOARD_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(tools, indent=2, sort_keys=True) + "\n")
    assert tools == json.loads(SNAPSHOT.read_text())


@pytest.mark.django_db
def test_no_tool_offers_a_scheduling_or_sender_choice(client):
    for tool in client.get("/api/v1/tools").json():
        properties = set(tool["input_schema"].get("properties", {}))
        assert not properties & {"sender", "notification_policy", "quiet", "followup", "schedule"}, tool["name"]
    send = next(t for t in client.get("/api/v1/tools").json() if t["name"] == "send_message")
    assert {"target", "message"} <= set(send["input_schema"]["required"])


@pytest.mark.django_db
def test_the_openapi_schema_documents_the_nine_tools_from_the_same_models(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert schema["openapi"].startswith("3.1")
    tools = client.get("/api/v1/tools").json()
    for tool in tools:
        operation = schema["paths"][f"/api/v1/tools/{tool['name']}"]["post"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        arguments = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert set(arguments.get("properties", {})) == set(tool["input_schema"].get("properties", {}))
        assert operation["security"] == [{"memberBearer": []}]


def test_the_registry_offers_exactly_the_protocols_tools_or_the_server_does_not_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured
    from steerboard_protocol.tools import TEAM_TOOLS

    from mailbox.transports import tools

    assert set(tools.TOOLS) == set(TEAM_TOOLS)
    tools.registry_check()
    monkeypatch.delitem(tools.TOOLS, "list_agents")  # a tool left out of the registry, on purpose
    with pytest.raises(ImproperlyConfigured, match="lacks \\['list_agents'\\]"):
        tools.registry_check()
