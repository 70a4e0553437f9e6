"""What each member is doing now, and why: its activity (docs/protocol.md, "Activity").

Derived when the roster is read, from what the server already records: the member's
phase and its session's last status frame (``teams.Member``), its latest history entry,
its host's start failure (the Lead log) and its pending human ask. Never from the
agent's word, and never by periodic work: nothing is written or run for it on the hot
path or for an idle session; "stalled" is the latest entry's age read against
``STEERBOARD_STALL_AFTER`` at read time.

Two reads per roster read, whatever the team's size or the length of its histories:
each member's latest entry (its kind, its time and the few fields that say what it
means: the tool, await_message's sender, a turn_end's reason and error) through the
(member, id) index, and the members' pending human asks (``asks_pending``). One more
only when it can matter: the start failures, when a member failed to start.

The rule (``activity_of``), the first row that matches:

| the member | state | since | detail |
|---|---|---|---|
| retired | retired | its retirement | none |
| failed to start | failed | the failure | the host's ``start_failed`` error |
| spawned, no session yet | inactive | the spawn | "provisioning: waiting for its host to start it" |
| running, its latest entry an open ``await_message`` / ``wait_agent`` call | waiting_peer | the call | whom |
| running, its latest entry another open tool call | working | the call | the tool |
| running, any other latest entry (or none) | working | that entry, or the turn's start | "thinking" |
| working, and no entry (nor status) for ``STALL_AFTER`` seconds | stalled | the latest entry | it and its age |
| not running, its last turn ended with ``reason: error`` | failed | the turn's end | the model provider's error |
| idle, inactive | idle, inactive | the status change | none |

A pending human ask makes a member ``waiting_human`` (since: the ask; detail: its
question) in place of waiting_peer, stalled, failed (its last turn), idle and inactive:
it waits for a person unless it is busy with a tool or thinking. A tool call is open while it is the latest entry (the
SDK reports each call's result before its next entry; another SDK's parallel calls read
as thinking once one result is in). A running member's reference time is the later of
its latest entry and its last status frame: a turn that just started, or a session that
just said hello mid-turn, is not stalled by an older entry.
"""
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import OuterRef, Subquery
from django.db.models.fields.json import KeyTextTransform, KeyTransform, compile_json_path
from django.utils import timezone

from mailbox.models import AskState, EntryKind, HistoryEntry, HumanAsk, LeadLogRecord, LogKind
from teams.models import Activity, Member, Phase, SessionState, Status
from teams.wire_format import iso

WAITING_TOOLS = ("await_message", "wait_agent")
PROVISIONING = "provisioning: waiting for its host to start it"
DETAIL_MAX = 500  # characters of a detail (an error, a question); the full text is where it came from


def stall_after() -> float:
    return float(settings.STEERBOARD["STALL_AFTER"])


@dataclass(frozen=True)
class Latest:
    """A member's latest history entry, as much of it as its activity needs."""

    kind: str
    at: datetime
    tool: str | None = None
    sender: str | None = None  # await_message's argument: whom it waits for
    reason: str | None = None  # a turn_end's
    error: str | None = None  # a turn_end's: the model provider's error


@dataclass(frozen=True)
class PendingAsk:
    ask_id: str
    asked_at: datetime
    question: str


@dataclass(frozen=True)
class MemberActivity:
    state: str
    since: datetime
    detail: str | None = None
    stalls_at: datetime | None = None  # working: when it becomes stalled if nothing is recorded first

    def out(self) -> dict:
        """As the wire shows it (teams.schemas.ActivityOut)."""
        return {"state": self.state, "since": iso(self.since), "detail": self.detail}


# --- the reads ---------------------------------------------------------------------------------
class _JsonText(KeyTextTransform):
    """An entry's JSON field as text, NULL when absent or JSON null on both databases (Django's
    own reads a JSON null as the text 'null' on SQLite: a model may well pass ``"sender": null``)."""

    def as_sqlite(self, compiler, connection):
        lhs, params, keys = self.preprocess_lhs(compiler, connection)
        return f"JSON_EXTRACT({lhs}, %s)", (*params, compile_json_path(keys))


def _field(*path: str) -> _JsonText:
    inner = "data"
    for key in path[:-1]:
        inner = KeyTransform(key, inner)
    return _JsonText(path[-1], inner)


def _text(value) -> str | None:
    return value if value is None or isinstance(value, str) else str(value)


def members_activity(members: list[Member], *, now: datetime | None = None) -> dict[int, MemberActivity]:
    """Per member id: its activity (two reads for them all; docstring above)."""
    now = now or timezone.now()
    ids = [m.pk for m in members]
    latest = latest_entries(member_ids=ids)
    failed = [m for m in members if m.phase == Phase.FAILED]
    failures = start_failures(team_id=failed[0].team_id) if failed else {}
    asks = asks_pending(member_ids=ids)
    return {
        m.pk: activity_of(m, latest=latest.get(m.pk), ask=asks.get(m.pk), start_failure=failures.get(m.name),
                          now=now, stall_after=stall_after())
        for m in members
    }


def latest_entries(*, member_ids: list[int]) -> dict[int, Latest]:
    """Per member id: its latest history entry, in one statement: each member's newest id
    from the (member, id) index, the rows by primary key, only the JSON fields that matter."""
    if not member_ids:
        return {}
    newest = HistoryEntry.objects.filter(member_id=OuterRef("pk")).order_by("-id").values("id")[:1]
    ids = Member.objects.filter(pk__in=member_ids).annotate(newest=Subquery(newest)).values("newest")
    rows = (
        HistoryEntry.objects.filter(pk__in=ids)
        .annotate(tool=_field("tool"), sender=_field("arguments", "sender"), reason=_field("reason"),
                  error=_field("error"))
        .values_list("member_id", "kind", "created_at", "tool", "sender", "reason", "error")
    )
    return {
        member_id: Latest(kind=kind, at=at, tool=_text(tool), sender=_text(sender), reason=_text(reason),
                          error=_text(error))
        for member_id, kind, at, tool, sender, reason, error in rows
    }


def start_failures(*, team_id: int) -> dict[str, str]:
    """The last start failure of each member, from the team's newest member records."""
    found: dict[str, str] = {}
    records = (
        LeadLogRecord.objects.filter(team_id=team_id, kind=LogKind.MEMBER).order_by("-id").values_list("data", flat=True)
    )
    for data in records[:500]:
        if isinstance(data, dict) and data.get("start_failed") and data.get("member") not in found:
            found[data["member"]] = str(data["start_failed"])
    return found


# waiting_human: the one place the human asks (ask_human, mailbox/members/asks.py) come in.
def asks_pending(*, member_ids: list[int]) -> dict[int, PendingAsk]:
    """Per member id: its oldest pending human ask (mailbox/members/asks.py), read for all of them at once."""
    if not member_ids:
        return {}
    found: dict[int, PendingAsk] = {}
    pending = HumanAsk.objects.filter(member_id__in=member_ids, state=AskState.PENDING).order_by("created_at", "id")
    for member_id, ask_id, asked_at, question in pending.values_list("member_id", "id", "created_at", "question"):
        found.setdefault(member_id, PendingAsk(ask_id=ask_id, asked_at=asked_at, question=question))
    return found


# --- the rule ----------------------------------------------------------------------------------
def activity_of(
    member: Member, *, latest: Latest | None, ask: PendingAsk | None, start_failure: str | None, now: datetime,
    stall_after: float,
) -> MemberActivity:
    """One member's activity from what the server recorded (the table in the docstring)."""
    if member.phase == Phase.RETIRED:
        return MemberActivity(Activity.RETIRED, member.status_changed_at)
    if member.phase == Phase.FAILED:
        return MemberActivity(Activity.FAILED, member.status_changed_at,
                              _short(start_failure) or "its host could not start it")
    if member.status == Status.PROVISIONING:
        return MemberActivity(Activity.INACTIVE, member.status_changed_at, PROVISIONING)
    found = _session_activity(member, latest=latest, now=now, stall_after=stall_after)
    if ask is not None and found.state != Activity.WORKING:
        return MemberActivity(Activity.WAITING_HUMAN, ask.asked_at, _short(ask.question))
    return found


def _session_activity(member: Member, *, latest: Latest | None, now: datetime, stall_after: float) -> MemberActivity:
    if member.session_state != SessionState.RUNNING:
        if latest is not None and latest.kind == EntryKind.TURN_END and latest.reason == "error":
            return MemberActivity(Activity.FAILED, latest.at, _short(latest.error) or "its model failed")
        state = Activity.IDLE if member.session_state == SessionState.IDLE else Activity.INACTIVE
        return MemberActivity(state, member.status_changed_at)
    # A turn is open. Its reference time: the later of the latest entry and the last status frame.
    since = member.status_changed_at if latest is None else max(latest.at, member.status_changed_at)
    if latest is not None and latest.kind == EntryKind.TOOL_CALL and latest.tool in WAITING_TOOLS:
        return MemberActivity(Activity.WAITING_PEER, since, _whom(latest))
    tool_open = latest is not None and latest.kind == EntryKind.TOOL_CALL
    stalls_at = since + timedelta(seconds=stall_after)
    if now >= stalls_at:
        return MemberActivity(Activity.STALLED, since, _quiet(latest, since=since, now=now))
    return MemberActivity(Activity.WORKING, since, (latest.tool or "a tool") if tool_open else "thinking", stalls_at)


def _whom(call: Latest) -> str:
    if call.tool == "wait_agent":
        return "wait_agent: any teammate's change"
    return f"await_message from {call.sender}" if call.sender else "await_message from any member"


def _quiet(latest: Latest | None, *, since: datetime, now: datetime) -> str:
    age = int((now - since).total_seconds())
    if latest is None or latest.at < since:
        return f"no history entry since its session reported running, {age} s ago"
    what = f"{latest.kind} {latest.tool}" if latest.tool else latest.kind
    return f"last entry {what}, {age} s ago"


def _short(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"
