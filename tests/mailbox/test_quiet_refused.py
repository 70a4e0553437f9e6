"""Quiet delivery stays absent: a send that asks for any delivery or scheduling choice is refused."""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import TeamMessage
from tests.support.inproc import spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "field,value",
    [
        ("notification_policy", "quiet"),
        ("notification_policy", "wake"),
        ("delivery", "quiet"),
        ("delivery_policy", "durable"),
        ("schedule", "2030-01-01T00:00:00Z"),
        ("send_at", "2030-01-01T00:00:00Z"),
        ("deliver_after", 60),
        ("followup_task", True),
        ("quiet", True),
        ("importance", "low"),
    ],
)
async def test_a_delivery_or_scheduling_field_is_refused_with_the_reason(api, field, value):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    refused = await api.tool(team["lead"], "send_message", target="implementer", message="hi", **{field: value})
    assert refused.status_code == 400
    body = refused.json()
    assert body["error"]["code"] == "VALIDATION_ERROR"
    assert body["persisted"] is False
    assert "always steer" in body["error"]["message"]
    assert repr(field) in body["error"]["message"]
    assert await database_sync_to_async(TeamMessage.objects.count)() == 0


async def test_the_same_send_without_the_field_goes_through(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "implementer")
    sent = await api.ok(team["lead"], "send_message", target="implementer", message="hi")
    assert sent["status"] in {"accepted", "queued"}
