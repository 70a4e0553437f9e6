"""A member's durable history read back: pages of it for a cold-resume, and its turns.

Entries are written by delivery (``delivery.entry_record`` and the hot path's
EntryJob), folded by (member, entry id). By convention each entry of a turn
carries the turn's ``turn_id``; a ``turn_start`` opens a turn and a ``turn_end``
closes it, and a human prompt's turn opens with the ``prompt`` entry that names
it. The dashboard's timeline (frontend/selectors.py) groups a whole history
into turns; the questions below are about one turn.
"""
from django.db.models import QuerySet

from mailbox.models import EntryKind, HistoryEntry
from teams.models import Member


def history_page(*, member: Member, after: int = 0, limit: int = 500) -> tuple[list[dict], int | None]:
    """A member's own durable history, in order, for cold-resume."""
    rows = list(HistoryEntry.objects.filter(member=member, id__gt=after).order_by("id")[: limit + 1])
    page = rows[:limit]
    entries = [{**r.data, "position": r.id} for r in page]
    return entries, (page[-1].id if len(rows) > limit else None)


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def turn_of(entry: HistoryEntry) -> str | None:
    """The turn an entry was recorded in: its own ``turn_id``, else the last ``turn_start``
    before it (``turn-at-<entry id>`` when that start names no turn)."""
    data = entry.data if isinstance(entry.data, dict) else {}
    turn_id = _text(data.get("turn_id"))
    if turn_id is not None:
        return turn_id
    opened = (
        HistoryEntry.objects.filter(member_id=entry.member_id, id__lt=entry.id, kind=EntryKind.TURN_START)
        .order_by("-id")
        .first()
    )
    if opened is None:
        return None
    start = opened.data if isinstance(opened.data, dict) else {}
    return _text(start.get("turn_id")) or f"turn-at-{opened.entry_id}"


def prompt_turn_start(*, member_id: int, prompt_id: str) -> HistoryEntry | None:
    """The ``prompt`` entry that opened a human prompt's turn, once its session recorded it."""
    return (
        HistoryEntry.objects.filter(member_id=member_id, kind=EntryKind.PROMPT, prompt_id=prompt_id)
        .order_by("id")
        .first()
    )


def turn_after(start: HistoryEntry, *, kinds: list[str]) -> QuerySet[HistoryEntry]:
    """The entries of ``kinds`` recorded after ``start`` in the same turn, in order."""
    data = start.data if isinstance(start.data, dict) else {}
    return HistoryEntry.objects.filter(
        member_id=start.member_id, id__gt=start.id, kind__in=kinds, data__turn_id=data.get("turn_id")
    ).order_by("id")
