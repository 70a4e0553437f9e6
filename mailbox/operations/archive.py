"""A team's whole record as one NDJSON stream, and that stream loaded into a new team
(docs/operations.md, "Export and import"): the archive of a finished run, or a restore here
or on another server.

One JSON object a line, each with its ``type``, in this order: ``export`` (the header: format
version, team, since), ``team``, ``member`` (the roster, Lead first), ``task`` (the board),
``message`` (every message with its Lead-log ``events``), ``log`` (the roster's, board's and
budget's Lead-log records), ``entry`` (every member's history, member by member), ``prompt``
(human prompts), ``usage`` (what each member's models used), ``end`` (the counts of each type).
Members are named, not numbered; tasks by their number; messages and prompts keep their ids,
which an import replaces with new ones (derived from the old, so nothing is held in memory).

The export reads in keyset pages of ``PAGE`` rows (``export_lines`` is a plain generator whose
every page is one complete query: it may be advanced from any database thread, and a team of
10⁵ messages streams in the memory of one page). The import reads line by line and writes in
batches of ``PAGE`` in one transaction. It restores rows as they were, so no transition runs
(nothing is admitted, pushed or rung): the members come back without sessions (``inactive``),
and a message still pending is taken up by recovery once the new team's host connects, as
after a restart. A prompt's author is the user of that username on this server (created
inactive when there is none).
"""
import json
import re
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.dateparse import parse_datetime

from mailbox.models import HistoryEntry, HumanPrompt, LeadLogRecord, MemberUsage, TeamMessage
from teams.errors import ErrorCode, TeamError
from teams.models import Member, SessionState, Task, Team
from teams.services import team_create
from teams.wire_format import iso

FORMAT = "steerboard-team-export"
VERSION = 1
PAGE = 500

MEMBER_FIELDS = ("name", "role", "description", "prompt", "context", "phase", "session_state", "next_seq",
                 "created_at", "status_changed_at")
TASK_FIELDS = ("number", "revision", "subject", "description", "status", "write_scopes", "created_at", "updated_at")
MESSAGE_FIELDS = ("id", "content", "seq", "thread_id", "reply_to", "kind", "state", "attempts", "failures", "repushes",
                  "last_error", "created_at", "queued_at", "accepted_at", "delivered_at", "cancelled_at")
ENTRY_FIELDS = ("entry_id", "kind", "message_id", "prompt_id", "data", "created_at")
PROMPT_FIELDS = ("id", "content", "state", "pushed_at", "created_at", "started_at", "completed_at")
USAGE_FIELDS = ("model", "input_tokens", "output_tokens", "cached_tokens", "replies", "updated_at")


def _out(row, fields: Iterable[str]) -> dict:
    out = {}
    for field in fields:
        value = getattr(row, field)
        out[field] = iso(value) if isinstance(value, datetime) else value
    return out


def _line(line_type: str, /, **fields) -> str:
    return json.dumps({"type": line_type, **fields}, ensure_ascii=False, sort_keys=True) + "\n"


# --- export ---------------------------------------------------------------------------------------
def export_lines(*, team: Team, since: datetime | None = None) -> Iterator[str]:
    """The team's NDJSON lines (``since``: only messages, records, entries and prompts from
    then on; the roster and the board are always whole)."""
    counts: dict[str, int] = {}

    def emit(line_type: str, /, **fields) -> str:
        counts[line_type] = counts.get(line_type, 0) + 1
        return _line(line_type, **fields)

    yield _line("export", format=FORMAT, version=VERSION, team=team.name, since=iso(since))
    yield emit("team", name=team.name, token_budget=team.token_budget, next_task_number=team.next_task_number,
               created_at=iso(team.created_at))
    members = list(Member.objects.filter(team=team).order_by("id"))
    names = {m.pk: m.name for m in members}
    for member in members:
        yield emit("member", **_out(member, MEMBER_FIELDS))
    for task in Task.objects.filter(team=team).prefetch_related("blocked_by").order_by("number"):
        yield emit("task", **_out(task, TASK_FIELDS), owner=names.get(task.owner_id),
                   created_by=names.get(task.created_by_id),
                   blocked_by=sorted(t.number for t in task.blocked_by.all()))
    for page in _message_pages(team=team, since=since):
        events: dict[str, list] = {}
        for record in LeadLogRecord.objects.filter(message_id__in=[m.id for m in page]).order_by("id"):
            events.setdefault(record.message_id, []).append(
                {"kind": record.kind, "data": record.data, "created_at": iso(record.created_at)}
            )
        for message in page:
            yield emit("message", **_out(message, MESSAGE_FIELDS), sender=names[message.sender_id],
                       target=names[message.target_id], events=events.get(message.id, []))
    records = LeadLogRecord.objects.filter(team=team, message__isnull=True)
    if since is not None:
        records = records.filter(created_at__gte=since)
    for page in _id_pages(records):
        for record in page:
            yield emit("log", kind=record.kind, data=record.data, created_at=iso(record.created_at))
    for member in members:
        entries = HistoryEntry.objects.filter(member=member)
        if since is not None:
            entries = entries.filter(created_at__gte=since)
        for page in _id_pages(entries):
            for entry in page:
                yield emit("entry", member=member.name, **_out(entry, ENTRY_FIELDS))
    prompts = HumanPrompt.objects.filter(team=team).select_related("author")
    if since is not None:
        prompts = prompts.filter(created_at__gte=since)
    for prompt in prompts.order_by("created_at", "id"):  # few: a queue of at most 64 per member, and the done
        yield emit("prompt", **_out(prompt, PROMPT_FIELDS), target=names[prompt.target_id],
                   author=prompt.author.get_username())
    for usage in MemberUsage.objects.filter(member__team=team).order_by("member_id", "model"):
        yield emit("usage", member=names[usage.member_id], **_out(usage, USAGE_FIELDS))
    yield _line("end", counts=counts)


def _message_pages(*, team: Team, since: datetime | None) -> Iterator[list[TeamMessage]]:
    """The team's messages by (target, seq), a page at a time (the (target, seq) unique index)."""
    for target_id in Member.objects.filter(team=team).order_by("id").values_list("id", flat=True):
        after = 0
        while True:
            rows = TeamMessage.objects.filter(target_id=target_id, seq__gt=after)
            if since is not None:
                rows = rows.filter(queued_at__gte=since)
            page = list(rows.order_by("seq")[:PAGE])
            if not page:
                break
            yield page
            after = page[-1].seq


def _id_pages(rows) -> Iterator[list]:
    after = 0
    while True:
        page = list(rows.filter(id__gt=after).order_by("id")[:PAGE])
        if not page:
            return
        yield page
        after = page[-1].id


# --- import ---------------------------------------------------------------------------------------
_IDS = re.compile(r"\b(team-message|prompt)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


class _Remap:
    """New message and prompt ids, each derived from the old one and this import's namespace:
    the same old id always maps to the same new one, with no table held in memory."""

    def __init__(self):
        self.namespace = uuid.uuid4()

    def id(self, old: str | None) -> str | None:
        if not old:
            return old
        found = _IDS.fullmatch(old)
        if found is None:
            return old
        return f"{found.group(1)}-{uuid.uuid5(self.namespace, old)}"

    def text(self, value: str) -> str:
        return _IDS.sub(lambda m: self.id(m.group(0)), value)

    def data(self, value):
        """A JSON value with every id in its strings replaced (entries name their message and prompt)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return value


def _bad(line_number: int, why: str) -> TeamError:
    return TeamError(ErrorCode.VALIDATION_ERROR, f"Line {line_number} of the export: {why}")


def _time(value, line_number: int):
    if value is None:
        return None
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None:
        raise _bad(line_number, f"{value!r} is not an ISO 8601 time.")
    return parsed


def _times(row, fields: dict, names: Iterable[str], line_number: int) -> None:
    for name in names:
        setattr(row, name, _time(fields.get(name), line_number))


class _Batches:
    """Rows waiting for their bulk INSERT, in the stream's order; the times the database would
    set itself (auto_now_add) put back afterwards."""

    def __init__(self):
        self.rows: dict[type, list] = {}
        self.kept: dict[type, tuple[str, ...]] = {}

    def add(self, row, kept: tuple[str, ...] = ("created_at",)) -> None:
        model = type(row)
        self.kept[model] = kept
        pending = self.rows.setdefault(model, [])
        pending.append(row)
        if len(pending) >= PAGE:
            self.flush(model)

    def flush(self, model: type | None = None) -> None:
        # Messages before the records and entries that name them.
        order = [TeamMessage, LeadLogRecord, HistoryEntry, HumanPrompt, MemberUsage]
        for m in order if model is None else [TeamMessage, model] if model is not TeamMessage else [model]:
            rows = self.rows.pop(m, [])
            if rows:
                _bulk_create(m, rows, self.kept[m])


def _bulk_create(model: type, rows: list, kept: tuple[str, ...]) -> None:
    """INSERT the rows, then put back the times the INSERT set itself (auto_now_add, auto_now):
    an archive keeps when things happened."""
    times = [{f: getattr(r, f) for f in kept} for r in rows]
    model.objects.bulk_create(rows)
    if not kept:
        return
    for row, values in zip(rows, times, strict=True):
        for field, value in values.items():
            setattr(row, field, value)
    model.objects.bulk_update(rows, list(kept))


def team_import(*, lines: Iterable[str], name: str) -> dict:
    """Load an export into a new team ``name``; answers the counts of each type, the Lead's
    token and the host token (shown once). Refused (nothing written): a stream that is not an
    export, a team name taken."""
    remap, batches = _Remap(), _Batches()
    counts: dict[str, int] = {}
    members: dict[str, Member] = {}
    tasks: dict[int, tuple[Task, list[int]]] = {}
    team = lead_token = host_token = None
    header = ended = False
    with transaction.atomic():
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                fields = json.loads(raw)
            except ValueError as exc:
                raise _bad(number, f"not JSON ({exc}).")
            if not isinstance(fields, dict) or not isinstance(fields.get("type"), str):
                raise _bad(number, "each line is a JSON object with a 'type'.")
            kind = fields.pop("type")
            if not header:
                if kind != "export" or fields.get("format") != FORMAT:
                    raise _bad(number, f"the first line is the header {{\"type\": \"export\", \"format\": \"{FORMAT}\"}}.")
                if fields.get("version") != VERSION:
                    raise _bad(number, f"format version {fields.get('version')!r}; this server reads {VERSION}.")
                header = True
                continue
            if ended:
                raise _bad(number, "a line after the 'end' line.")
            try:
                if kind == "team":
                    team, lead, lead_token, host_token = team_create(name=name)
                    Team.objects.filter(pk=team.pk).update(
                        token_budget=fields.get("token_budget"), next_task_number=fields["next_task_number"],
                        created_at=_time(fields["created_at"], number),
                    )
                    members["lead"] = lead
                elif team is None:
                    raise _bad(number, "the 'team' line comes before every other.")
                elif kind == "member":
                    _member_load(team, members, fields, number)
                elif kind == "task":
                    task = Task(team=team, owner=members.get(fields.get("owner")),
                                created_by=members.get(fields.get("created_by")),
                                **{f: fields[f] for f in TASK_FIELDS if f not in ("created_at", "updated_at")})
                    _times(task, fields, ("created_at", "updated_at"), number)
                    tasks[task.number] = (task, list(fields.get("blocked_by") or []))
                elif kind == "message":
                    _message_load(batches, team, members, remap, fields, number)
                elif kind == "log":
                    record = LeadLogRecord(team=team, kind=fields["kind"], data=remap.data(fields["data"]))
                    _times(record, fields, ("created_at",), number)
                    batches.add(record)
                elif kind == "entry":
                    entry = HistoryEntry(
                        member=members[fields["member"]], entry_id=fields["entry_id"], kind=fields["kind"],
                        message_id=remap.id(fields.get("message_id")), prompt_id=remap.id(fields.get("prompt_id")),
                        data=remap.data(fields["data"]),
                    )
                    _times(entry, fields, ("created_at",), number)
                    batches.add(entry)
                elif kind == "prompt":
                    prompt = HumanPrompt(
                        id=remap.id(fields["id"]), team=team, target=members[fields["target"]],
                        author=_author(fields["author"]), content=fields["content"], state=fields["state"],
                    )
                    _times(prompt, fields, ("pushed_at", "created_at", "started_at", "completed_at"), number)
                    batches.add(prompt)
                elif kind == "usage":
                    usage = MemberUsage(member=members[fields["member"]],
                                        **{f: fields[f] for f in USAGE_FIELDS if f != "updated_at"})
                    _times(usage, fields, ("updated_at",), number)
                    batches.add(usage, kept=())
                elif kind == "end":
                    ended = True
                    continue
                else:
                    raise _bad(number, f"unknown type {kind!r}.")
            except KeyError as exc:
                raise _bad(number, f"a {kind} without {exc.args[0]!r} (or naming a member not in the roster).")
            except (TypeError, ValueError) as exc:
                raise _bad(number, f"a {kind} with a field of the wrong kind ({exc}).")
            counts[kind] = counts.get(kind, 0) + 1
        if team is None:
            raise _bad(0, "no 'team' line: the stream is empty or cut short.")
        if not ended:
            raise _bad(0, "no 'end' line: the stream was cut short.")
        if tasks:
            _bulk_create(Task, [t for t, _ in tasks.values()], ("created_at", "updated_at"))
            for task, blocked_by in tasks.values():
                if blocked_by:
                    task.blocked_by.set([tasks[n][0] for n in blocked_by if n in tasks])
        batches.flush()
    return {"team": name, "counts": counts, "lead": {"name": "lead", "token": lead_token}, "host_token": host_token}


def _member_load(team: Team, members: dict[str, Member], fields: dict, number: int) -> None:
    values = {f: fields[f] for f in MEMBER_FIELDS if f not in ("created_at", "status_changed_at")}
    # Restored without a session: nothing is connected to the new team yet.
    values["session_state"] = SessionState.INACTIVE
    member = members.get(fields["name"]) if fields["name"] == "lead" else None
    if member is None:
        member = Member.objects.create(team=team, **values)
        members[member.name] = member
    else:
        Member.objects.filter(pk=member.pk).update(**values)
    Member.objects.filter(pk=member.pk).update(
        created_at=_time(fields["created_at"], number), status_changed_at=_time(fields["status_changed_at"], number)
    )


def _message_load(batches: _Batches, team: Team, members: dict[str, Member], remap: _Remap, fields: dict,
                  number: int) -> None:
    message = TeamMessage(
        id=remap.id(fields["id"]), team=team, sender=members[fields["sender"]], target=members[fields["target"]],
        content=fields["content"], seq=fields["seq"], thread_id=remap.id(fields["thread_id"]) or "",
        reply_to=remap.id(fields["reply_to"]) or "", kind=fields["kind"], state=fields["state"],
        attempts=fields["attempts"], failures=fields["failures"], repushes=fields["repushes"],
        last_error=fields["last_error"],
    )
    _times(message, fields, ("created_at", "queued_at", "accepted_at", "delivered_at", "cancelled_at"), number)
    batches.add(message)
    for event in fields.get("events") or []:
        record = LeadLogRecord(team=team, kind=event["kind"], message_id=message.id, data=remap.data(event["data"]))
        _times(record, event, ("created_at",), number)
        batches.add(record)


def _author(username: str):
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    if user is None:
        user = User.objects.create_user(username=username, is_active=False)  # an unusable password
    return user
