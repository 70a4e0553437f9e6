"""The Lead log's message records (mailbox/engine/lead_log.py) hold exactly the fields it
defines for their kind, whichever path wrote them: the send and deliver jobs
(mailbox/engine/hot_path.py: SQLite's batch INSERT, PostgreSQL's WITH clauses) and admission,
retries and recovery (mailbox/engine/delivery.py through mailbox/engine/lead_log.py). A shape that
drifts on one path fails here."""
import inspect

import pytest
from channels.db import database_sync_to_async

from django.utils import timezone

from mailbox.engine import delivery, hot_path, lead_log
from mailbox.plumbing import faults
from mailbox.engine.lead_log import (
    MESSAGE_FIELDS,
    accepted_record,
    ask_answered_record,
    ask_expired_record,
    cancelled_record,
    delivered_record,
    failed_record,
    queued_record,
    records_select,
    retried_record,
)
from mailbox.members import asks
from mailbox.models import HumanAsk, LeadLogRecord, LogKind, TeamMessage
from mailbox.plumbing import wire
from tests.mailbox.test_hot_path import entry_for, member
from tests.support.inproc import Agent, spawn, team_new
from tests.support.sends import message_send

pytestmark = pytest.mark.django_db(transaction=True)

BUILDERS = {
    LogKind.MESSAGE_QUEUED: queued_record,
    LogKind.MESSAGE_ACCEPTED: accepted_record,
    LogKind.MESSAGE_FAILED: failed_record,
    LogKind.MESSAGE_RETRIED: retried_record,
    LogKind.MESSAGE_DELIVERED: delivered_record,
    LogKind.MESSAGE_CANCELLED: cancelled_record,
    LogKind.ASK_ANSWERED: ask_answered_record,
    LogKind.ASK_EXPIRED: ask_expired_record,
}


def test_each_builder_takes_its_kinds_fields_and_makes_a_record_of_them():
    assert set(BUILDERS) == set(MESSAGE_FIELDS) == set(lead_log.EVENT_KINDS)
    for kind, build in BUILDERS.items():
        parameters = inspect.signature(build).parameters
        assert tuple(parameters) == MESSAGE_FIELDS[kind], kind
        assert all(p.kind is p.KEYWORD_ONLY for p in parameters.values()), kind
        values = {name: f"value of {name}" for name in MESSAGE_FIELDS[kind]}
        assert list(build(**values).items()) == list(values.items()), kind


def test_a_clause_refuses_a_record_that_is_not_its_kinds():
    shape = {"team": "%(team)s", "message": "%(id)s", "now": "%(now)s", "source": "t"}
    with pytest.raises(ValueError, match="fields"):
        records_select(LogKind.MESSAGE_QUEUED, delivered_record(target="x", seq="t.seq"), **shape)
    select = records_select(LogKind.MESSAGE_DELIVERED, delivered_record(target="x", seq="t.seq"), **shape)
    assert "jsonb_build_object('target', x, 'seq', t.seq)" in select


@database_sync_to_async
def records_of(message_id: str) -> list[tuple[str, dict]]:
    return [(r.kind, r.data) for r in LeadLogRecord.objects.filter(message_id=message_id).order_by("id")]


@database_sync_to_async
def seq_of(message_id: str) -> int:
    return TeamMessage.objects.get(pk=message_id).seq


def assert_shaped(records: list[tuple[str, dict]]) -> None:
    # A set: PostgreSQL's jsonb keeps no key order.
    for kind, data in records:
        assert set(data) == set(MESSAGE_FIELDS[kind]), (kind, data)


async def test_a_send_and_its_delivery_on_the_hot_path_write_the_records_the_lead_log_defines(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("idle")
    await spawn(api, team["lead"], "alpha", "reviewer")  # no session: the send is only queued
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")

    pushed = await hot_path.message_send(sender=lead, target_name="implementer", content="admitted at once")
    assert pushed["status"] == "accepted"
    mid = pushed["message_id"]
    assert await hot_path.entry_submit(member=target, entry=wire.Entry.model_validate(entry_for(mid, "e-1"))) is True
    seq = await seq_of(mid)
    assert await records_of(mid) == [
        (LogKind.MESSAGE_QUEUED, queued_record(sender="lead", target="implementer", seq=seq)),
        (LogKind.MESSAGE_ACCEPTED, accepted_record(target="implementer", seq=seq, target_status="idle", redelivery=False)),
        (LogKind.MESSAGE_DELIVERED, delivered_record(target="implementer", seq=seq)),
    ]

    waiting = await hot_path.message_send(sender=lead, target_name="reviewer", content="only queued")
    written = await records_of(waiting["message_id"])
    assert written[0] == (
        LogKind.MESSAGE_QUEUED, queued_record(sender="lead", target="reviewer", seq=await seq_of(waiting["message_id"]))
    )
    assert_shaped(written)
    await agent.close()


async def test_every_record_of_admission_and_recovery_has_the_fields_the_lead_log_defines(api):
    team = await team_new()
    agent = Agent(await spawn(api, team["lead"], "alpha", "implementer"))
    await agent.connect("running")
    await spawn(api, team["lead"], "alpha", "reviewer")  # no session, no host: admission waits
    lead, target = await member("alpha", "lead"), await member("alpha", "implementer")
    send = database_sync_to_async(message_send)

    delivered, _ = await send(sender=lead, target_name="implementer", content="pushed and delivered")
    await database_sync_to_async(hot_path.entry_record)(member=target, entry=entry_for(delivered.id, "e-1"))
    faults.arm("admission", times=1)
    failed, _ = await send(sender=lead, target_name="implementer", content="a failed admission")
    waits, _ = await send(sender=lead, target_name="reviewer", content="waits for a host")
    # An operator's retry admits the failed one; a redelivery pushes it again.
    assert await database_sync_to_async(delivery.messages_retry)(messages=[failed], by="ops") == 1
    await database_sync_to_async(delivery.target_admit)(target_id=target.pk, redeliver=True)
    taken_back, _ = await send(sender=lead, target_name="reviewer", content="an operator takes it back")
    await database_sync_to_async(delivery.message_cancel)(message=taken_back, by="ops")

    # A person's answer to an ask, and an ask that expired (mailbox/members/asks.py).
    for question, expires in (("answered?", None), ("expired?", 60)):
        ask = await database_sync_to_async(asks.ask_create)(
            member=target, question=question, options=[], expires_in_s=expires
        )
        if expires:
            await database_sync_to_async(
                lambda: HumanAsk.objects.filter(pk=ask.pk).update(expires_at=timezone.now())
            )()
            assert await database_sync_to_async(asks.asks_expire)() == 1
        else:
            await database_sync_to_async(asks.ask_answer)(team_id=target.team_id, ask_id=ask.id, answer="yes", by="ops")
    answers = await database_sync_to_async(
        lambda: list(HumanAsk.objects.order_by("created_at").values_list("answer_message_id", flat=True))
    )()

    written = [r for m in (delivered.id, failed.id, waits.id, taken_back.id, *answers) for r in await records_of(m)]
    assert {kind for kind, _ in written} == set(MESSAGE_FIELDS)
    assert_shaped(written)
    [wait] = [d for kind, d in await records_of(waits.id) if kind == LogKind.MESSAGE_FAILED]
    assert wait == failed_record(target="reviewer", seq=waits.seq, error=wait["error"], waiting=True)
    assert "no host" in wait["error"]
    redelivered = [d for kind, d in await records_of(failed.id) if kind == LogKind.MESSAGE_ACCEPTED]
    assert [d["redelivery"] for d in redelivered] == [False, True]
    await agent.close()
