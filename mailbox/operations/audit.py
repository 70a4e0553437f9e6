"""The delivery audit, the operator's consistency check of a team's delivery promises (docs/delivery.md,
docs/protocol.md "What the server promises about delivery"), read from the database:

- every ``delivered`` message is in its target's history exactly once, and has
  exactly one ``team/message/delivered`` Lead-log record; a message not yet
  delivered has none;
- no history holds a message addressed to another member;
- per target, the history holds its messages in ``seq`` order from 1 with no gap.

A message still ``queued`` or ``accepted`` is no inconsistency (it is on its
way) and is counted as ``undelivered``; ``--all-delivered`` makes it one, for a
team that is quiet (every session caught up, as after a load run). Exits 1 when
a check fails.
"""
from collections import defaultdict

from django.db.models import Count

from mailbox.models import HistoryEntry, LeadLogRecord, LogKind, MessageState, TeamMessage
from teams.models import Member, Team

CHECKS = (
    "missing_from_history",
    "duplicated_in_history",
    "delivered_records_wrong",
    "out_of_order_targets",
    "foreign_entries",
)
EXAMPLES = 10
CHUNK = 5000


def delivery_audit(team: Team) -> dict:
    """The audit of one team, as the JSON the command prints (without ``ok``'s policy
    on undelivered messages: see ``verdict``)."""
    names = dict(Member.objects.filter(team=team).values_list("id", "name"))
    messages: dict[str, tuple[int, int, str]] = {}
    for message_id, target_id, seq, state in (
        TeamMessage.objects.filter(team=team).values_list("id", "target_id", "seq", "state").iterator(chunk_size=CHUNK)
    ):
        messages[message_id] = (target_id, seq, state)
    records = dict(
        LeadLogRecord.objects.filter(team=team, kind=LogKind.MESSAGE_DELIVERED, message__isnull=False)
        .values("message_id")
        .annotate(n=Count("id"))
        .values_list("message_id", "n")
    )
    found: dict[str, list] = {name: [] for name in CHECKS}
    in_history: dict[str, int] = defaultdict(int)
    order: dict[int, list[int]] = defaultdict(list)
    entries = (
        HistoryEntry.objects.filter(member__team=team, message_id__isnull=False)
        .order_by("id")
        .values_list("member_id", "message_id")
        .iterator(chunk_size=CHUNK)
    )
    for member_id, message_id in entries:
        message = messages.get(message_id)
        if message is None or message[0] != member_id:
            found["foreign_entries"].append(f"{names.get(member_id, member_id)}: {message_id}")
            continue
        in_history[message_id] += 1
        order[member_id].append(message[1])
    delivered = undelivered = 0
    for message_id, (_, _, state) in messages.items():
        count = in_history.get(message_id, 0)
        if count > 1:
            found["duplicated_in_history"].append(message_id)
        if state == MessageState.DELIVERED:
            delivered += 1
            if count == 0:
                found["missing_from_history"].append(message_id)
            if records.get(message_id, 0) != 1:
                found["delivered_records_wrong"].append([message_id, records.get(message_id, 0)])
        else:
            undelivered += 1
            if records.get(message_id, 0):
                found["delivered_records_wrong"].append([message_id, records[message_id]])
    for target_id, seqs in order.items():
        if seqs != list(range(1, len(seqs) + 1)):
            found["out_of_order_targets"].append(names.get(target_id, str(target_id)))
    out = {"team": team.name, "messages": len(messages), "delivered": delivered, "undelivered": undelivered}
    out.update({name: len(values) for name, values in found.items()})
    out["examples"] = {name: values[:EXAMPLES] for name, values in found.items() if values}
    return out


def verdict(audit: dict, *, all_delivered: bool) -> bool:
    return not any(audit[name] for name in CHECKS) and not (all_delivered and audit["undelivered"])


def summary(audit: dict) -> str:
    verdict_word = "OK" if audit.get("ok", True) else "FAILED"
    return (
        f"{verdict_word}: {audit['messages']} messages, {audit['delivered']} delivered, {audit['undelivered']} not yet; "
        f"delivered but missing from the history {audit['missing_from_history']}, duplicated in a history "
        f"{audit['duplicated_in_history']}, delivered-record errors {audit['delivered_records_wrong']}, targets out of "
        f"order {audit['out_of_order_targets']}, entries in the wrong history {audit['foreign_entries']}"
    )
