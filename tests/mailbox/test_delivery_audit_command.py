"""manage.py delivery_audit: the operator's consistency check (docs/operations.md) says OK
for a team whose messages were delivered as promised, and reports, with exit status 1,
a delivery out of seq order, a message in a second history, and a delivered message
that its history does not hold."""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from mailbox.engine import hot_path
from tests.support.sends import message_send
from mailbox.models import HistoryEntry, MessageState, TeamMessage
from teams.services import member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


def audit(*args) -> tuple[dict, bool]:
    """The command's JSON and whether it exited 0."""
    out = StringIO()
    try:
        call_command("delivery_audit", *args, "--json", stdout=out)
        passed = True
    except CommandError as exc:
        assert exc.returncode == 1
        passed = False
    return json.loads(out.getvalue()), passed


def deliver(member, message) -> None:
    entry = {
        "id": f"msg-{message.id}",
        "kind": "user_message",
        "text": message.content,
        "source": {"kind": "team-message", "message_id": message.id},
    }
    hot_path.entry_record(member=member, entry=entry)


@pytest.fixture
def team():
    _, lead, _, _ = team_create(name="audited")
    coder = member_spawn(lead=lead, name="coder", description="writes code", prompt="")
    tester = member_spawn(lead=lead, name="tester", description="tests", prompt="")
    return lead, coder, tester


def send(lead, target, text):
    message, _ = message_send(sender=lead, target_name=target.name, content=text)
    return message


def test_a_team_delivered_in_order_passes(team):
    lead, coder, tester = team
    first, second = send(lead, coder, "one"), send(lead, coder, "two")
    other = send(lead, tester, "three")
    for target, message in ((coder, first), (coder, second), (tester, other)):
        deliver(target, message)
    deliver(coder, first)  # a repeat folds
    report, passed = audit("audited", "--all-delivered")
    assert passed and report["ok"]
    assert (report["messages"], report["delivered"], report["undelivered"]) == (3, 3, 0)
    assert report["examples"] == {}


def test_an_undelivered_message_fails_only_when_all_must_be_delivered(team):
    lead, coder, _ = team
    deliver(coder, send(lead, coder, "one"))
    send(lead, coder, "on its way")
    report, passed = audit("audited")
    assert passed and report["undelivered"] == 1
    report, passed = audit("audited", "--all-delivered")
    assert not passed and not report["ok"]


def test_a_delivery_out_of_seq_order_is_reported(team):
    lead, coder, _ = team
    first, second = send(lead, coder, "one"), send(lead, coder, "two")
    deliver(coder, second)  # seq 2 entered the history before seq 1
    deliver(coder, first)
    report, passed = audit("audited")
    assert not passed and not report["ok"]
    assert report["out_of_order_targets"] == 1
    assert report["examples"]["out_of_order_targets"] == ["coder"]


def test_a_message_in_a_second_history_is_reported(team):
    lead, coder, tester = team
    message = send(lead, coder, "for the coder")
    deliver(coder, message)
    HistoryEntry.objects.create(
        member=tester, entry_id="stolen", kind="user_message", message_id=message.id, data={"id": "stolen"}
    )
    report, passed = audit("audited")
    assert not passed and report["foreign_entries"] == 1
    assert report["examples"]["foreign_entries"] == [f"tester: {message.id}"]


def test_a_delivered_message_missing_from_its_history_is_reported(team):
    lead, coder, _ = team
    message = send(lead, coder, "lost")
    TeamMessage.objects.filter(pk=message.pk).update(state=MessageState.DELIVERED)
    report, passed = audit("audited")
    assert not passed
    assert report["missing_from_history"] == 1
    assert report["delivered_records_wrong"] == 1  # and it has no delivered record
    assert report["examples"]["missing_from_history"] == [message.id]


def test_an_unknown_team_is_refused():
    with pytest.raises(CommandError, match="NOT_FOUND"):
        call_command("delivery_audit", "nobody", "--json", stdout=StringIO())
