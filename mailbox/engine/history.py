"""A member's durable history read back: pages of it for a cold-resume, and its turns.

Entries are written by the writer's EntryJob (mailbox/engine/hot_path.py), folded
by (member, entry id). By convention each entry of a turn
carries the turn's ``turn_id``; a ``turn_start`` opens a turn and a ``turn_end``
closes it, and a human prompt's turn opens with the ``prompt`` entry that names
it. Which turn an entry is in is the one rule of sdk/steerboard_protocol/turns.py, which
the dashboard's timeline (frontend/selectors.py) and the session's cold-resume
(sdk/steerboard_agents/resume.py) follow too; the questions below are about one turn.
"""
from collections.abc import Iterable

from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from steerboard_protocol.turns import HistoryTurns, named_turn
from mailbox.models import EntryKind, HistoryEntry
from teams.models import Member

# How far back turn_of reads for an entry that names no turn.
TURN_WINDOW = 200


def history_page(*, member: Member, after: int = 0, limit: int = 500) -> tuple[list[dict], int | None]:
    """A member's own durable history, in order, for cold-resume."""
    rows = list(HistoryEntry.objects.filter(member=member, id__gt=after).order_by("id")[: limit + 1])
    page = rows[:limit]
    entries = [{**r.data, "position": r.id} for r in page]
    return entries, (page[-1].id if len(rows) > limit else None)


def _placed(placing: HistoryTurns, row: HistoryEntry) -> str:
    return placing.place(row.kind, named_turn(row.data), row.entry_id).turn_id


def turn_of(entry: HistoryEntry) -> str:
    """The turn an entry was recorded in: its own ``turn_id``, else what the turn rule
    makes of the member's entries up to it (the last ``TURN_WINDOW`` of them)."""
    named = named_turn(entry.data)
    if named is not None:
        return named
    window = list(
        HistoryEntry.objects.filter(member_id=entry.member_id, id__lte=entry.id).order_by("-id")[:TURN_WINDOW]
    )
    placing = HistoryTurns()
    turn_id = ""
    for row in reversed(window):
        turn_id = _placed(placing, row)
    return turn_id


# The partial index history_turn_bounds's condition, as a literal: SQLite's planner uses
# a partial index only when the query repeats its condition, and a bound parameter
# (what ``kind__in`` makes) does not count.
_TURN_BOUNDS = RawSQL(f"kind IN ('{EntryKind.TURN_START}', '{EntryKind.TURN_END}')", [], output_field=BooleanField())


def prompt_turn_starts(prompts: Iterable[tuple[int, str]]) -> dict[tuple[int, str], HistoryEntry]:
    """The ``prompt`` entries that opened human prompts' turns, by (member id, prompt id),
    for those whose session recorded one: one query on the history_prompt_entry index,
    however long the histories."""
    wanted = set(prompts)
    if not wanted:
        return {}
    rows = HistoryEntry.objects.filter(
        kind=EntryKind.PROMPT,
        member_id__in={member_id for member_id, _ in wanted},
        prompt_id__in={prompt_id for _, prompt_id in wanted},
    ).order_by("-id")
    # Oldest last, so the first entry naming a prompt is the one kept.
    return {(r.member_id, r.prompt_id): r for r in rows if (r.member_id, r.prompt_id) in wanted}


def prompt_turn_start(*, member_id: int, prompt_id: str) -> HistoryEntry | None:
    """The ``prompt`` entry that opened a human prompt's turn, once its session recorded it."""
    return prompt_turn_starts([(member_id, prompt_id)]).get((member_id, prompt_id))


def turn_bounded_after(start: HistoryEntry) -> bool:
    """Whether the member's history holds a ``turn_start`` or ``turn_end`` after ``start``.
    Until it does, the turn ``start`` is in has not ended (``turn_after`` ends a turn at
    nothing else): one range of the history_turn_bounds index tells."""
    # Counted, not asked for the first one: with a LIMIT (``exists()``, ``first()``, either
    # order) PostgreSQL, once it has the table's statistics, expects a boundary within a few
    # rows of the primary key and walks every later entry of every member while the turn
    # still runs, which is exactly when this is asked. Counted, it compares the two ranges
    # whole, and the index's holds the member's boundaries only: none while the turn runs,
    # a few once it ended (the task is settled at the read that finds them). A turn left
    # without its end (a session that could not resume it) leaves its task working, and each
    # read of it counts the member's boundaries since: two a later turn.
    later = HistoryEntry.objects.filter(member_id=start.member_id, id__gt=start.id).filter(_TURN_BOUNDS)
    return later.count() > 0


def turn_after(start: HistoryEntry, *, kinds: list[str]) -> list[HistoryEntry]:
    """The entries of ``kinds`` recorded after ``start`` in the same turn, in order: up to
    the turn's ``turn_end``, or the ``turn_start`` of the next turn (a session runs one
    turn at a time, so a turn left unfinished has nothing after that)."""
    placing = HistoryTurns()
    turn_id = _placed(placing, start)
    out = []
    later = HistoryEntry.objects.filter(member_id=start.member_id, id__gt=start.id).order_by("id")
    for row in later.iterator(chunk_size=200):
        placed_in = _placed(placing, row)
        if placed_in != turn_id:
            if row.kind == EntryKind.TURN_START:
                break
            continue
        if row.kind in kinds:
            out.append(row)
        if row.kind == EntryKind.TURN_END:
            break
    return out
