"""The delivery audit: reads a live environment's database after a run and says
whether every promise held. Shared by the multi-process and crash-window tests
and the soak benchmark.

For every stored team message: exactly one entry carrying it in its target's
history, exactly one ``team/message/delivered`` record, state ``delivered``;
per target, the history holds the messages in ``seq`` order with no gap.
"""
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Audit:
    messages: int = 0
    delivered: int = 0
    missing_from_history: list[str] = field(default_factory=list)
    duplicated_in_history: list[str] = field(default_factory=list)
    delivered_records_wrong: list[tuple[str, int]] = field(default_factory=list)
    not_marked_delivered: list[str] = field(default_factory=list)
    out_of_order_targets: list[int] = field(default_factory=list)
    foreign_entries: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.missing_from_history
            or self.duplicated_in_history
            or self.delivered_records_wrong
            or self.not_marked_delivered
            or self.out_of_order_targets
            or self.foreign_entries
        )

    def summary(self) -> str:
        return (
            f"{self.messages} messages, {self.delivered} delivered; missing {len(self.missing_from_history)}, "
            f"duplicated {len(self.duplicated_in_history)}, delivered-record errors {len(self.delivered_records_wrong)}, "
            f"not marked delivered {len(self.not_marked_delivered)}, targets out of order "
            f"{len(self.out_of_order_targets)}, entries in the wrong history {len(self.foreign_entries)}"
        )

    def details(self, limit: int = 5) -> str:
        parts = [self.summary()]
        for name in (
            "missing_from_history",
            "duplicated_in_history",
            "delivered_records_wrong",
            "not_marked_delivered",
            "out_of_order_targets",
            "foreign_entries",
        ):
            values = getattr(self, name)
            if values:
                parts.append(f"{name}: {values[:limit]}")
        return "\n".join(parts)


def _team_members(team: str | None) -> str:
    """SQL: the ids of the team's members (every member's when ``team`` is None)."""
    if team is None:
        return "SELECT id FROM teams_member"
    assert "'" not in team
    return f"SELECT s.id FROM teams_member s JOIN teams_team t ON t.id = s.team_id WHERE t.name = '{team}'"


def delivery_audit(environment, team: str | None = None) -> Audit:
    """The audit of every message in the environment, or of the messages to ``team``'s members
    (for tests that share one environment, each with a team of its own)."""
    members = _team_members(team)
    messages = environment.query(
        f"SELECT id, target_id, seq, state FROM mailbox_teammessage WHERE target_id IN ({members})")
    # Every entry carrying a message, whichever history: one in the wrong history is found as foreign.
    entries = environment.query(
        "SELECT id, member_id, message_id FROM mailbox_historyentry WHERE message_id IS NOT NULL"
        + ("" if team is None else f" AND (member_id IN ({members}) OR message_id IN "
           f"(SELECT id FROM mailbox_teammessage WHERE target_id IN ({members})))")
        + " ORDER BY id"
    )
    delivered = environment.query(
        "SELECT message_id, COUNT(*) FROM mailbox_leadlogrecord "
        "WHERE kind = 'team/message/delivered' GROUP BY message_id"
    )
    audit = Audit(messages=len(messages))
    by_id = {m[0]: m for m in messages}
    in_history: dict[str, int] = defaultdict(int)
    order: dict[int, list[int]] = defaultdict(list)
    for _, member_id, message_id in entries:
        message = by_id.get(message_id)
        if message is None or message[1] != member_id:
            audit.foreign_entries.append(message_id)
            continue
        in_history[message_id] += 1
        order[member_id].append(message[2])
    delivered_count = dict(delivered)
    for message_id, target_id, seq, state in messages:
        count = in_history.get(message_id, 0)
        if count == 0:
            audit.missing_from_history.append(message_id)
        elif count > 1:
            audit.duplicated_in_history.append(message_id)
        records = delivered_count.get(message_id, 0)
        if records != 1:
            audit.delivered_records_wrong.append((message_id, records))
        if state != "delivered":
            audit.not_marked_delivered.append(message_id)
        else:
            audit.delivered += 1
    for target_id, seqs in order.items():
        if seqs != list(range(1, len(seqs) + 1)):
            audit.out_of_order_targets.append(target_id)
    return audit


def target_histories(environment, team: str | None = None) -> dict[int, list[str]]:
    """target id -> the team messages in its history, in history order (``team``'s members only, if named)."""
    rows = environment.query(
        "SELECT member_id, message_id FROM mailbox_historyentry WHERE message_id IS NOT NULL"
        + ("" if team is None else f" AND member_id IN ({_team_members(team)})")
        + " ORDER BY id"
    )
    out: dict[int, list[str]] = defaultdict(list)
    for member_id, message_id in rows:
        out[member_id].append(message_id)
    return dict(out)
