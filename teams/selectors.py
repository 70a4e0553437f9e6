"""Reads of the roster and the task board."""
from django.db.models import Exists, OuterRef, QuerySet

from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, SessionState, Task, TaskStatus, Team
from teams.schemas import MemberOut, TaskOut
from teams.tokens import token_hash
from teams.wire_format import cursor_decode, cursor_encode, cursor_refused


def member_by_token(*, token: str) -> Member | None:
    if not token:
        return None
    return (
        Member.objects.select_related("team")
        .filter(tokens__token_hash=token_hash(token))
        .first()
    )


def team_by_host_token(*, token: str) -> Team | None:
    if not token:
        return None
    return Team.objects.filter(host_token_hash=token_hash(token)).first()


def team_list() -> list[Team]:
    """Every team, by name."""
    return list(Team.objects.order_by("name"))


def team_by_name(*, name: str) -> Team | None:
    return Team.objects.filter(name=name).first()


def team_get(*, name: str) -> Team:
    team = team_by_name(name=name)
    if team is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No team named {name!r}.")
    return team


def member_list(*, team_id: int) -> list[Member]:
    return list(Member.objects.filter(team_id=team_id).order_by("id"))


def member_get(*, team_id: int, name: str) -> Member | None:
    return Member.objects.filter(team_id=team_id, name=name).first()


def member_out(member: Member, *, activity: dict) -> dict:
    """A member as the tools show it (teams.schemas.MemberOut: the model is the one list of fields),
    with its ``activity`` (mailbox/members/activity.py derives it)."""
    return MemberOut(
        name=member.name, role=member.role, status=member.status, description=member.description, activity=activity
    ).model_dump()


def member_is_active(member: Member) -> bool:
    """Running or provisioning: someone wait_agent can wait for."""
    return member.phase == Phase.PROVISIONING or (
        member.phase == Phase.ACTIVE and member.session_state == SessionState.RUNNING
    )


def _blocker_open():
    return Task.blocked_by.through.objects.filter(from_task_id=OuterRef("pk")).exclude(
        to_task__status__in=[TaskStatus.COMPLETED, TaskStatus.DELETED]
    )


def tasks_with_ready(qs: QuerySet[Task]) -> QuerySet[Task]:
    return qs.select_related("owner").prefetch_related("blocked_by").annotate(has_open_blocker=Exists(_blocker_open()))


_OPEN = (TaskStatus.PENDING, TaskStatus.IN_PROGRESS)


def _scope_prefix(scope: str) -> list[str]:
    """A write scope's literal segments, up to its first glob."""
    segments = []
    for segment in scope.split("/"):
        if any(c in segment for c in "*?["):
            break
        segments.append(segment)
    return segments


def _scopes_overlap(a: str, b: str) -> bool:
    pa, pb = _scope_prefix(a), _scope_prefix(b)
    n = min(len(pa), len(pb))
    return pa[:n] == pb[:n]


def tasks_out(tasks: list[Task], *, team_id: int) -> list[dict]:
    """The tasks as the tools show them, each open one warned of write scopes that
    overlap another open task's (one query for the board's open scopes)."""
    scoped = {t.pk for t in tasks if t.status in _OPEN and t.write_scopes}
    board = []
    if scoped:
        board = list(
            Task.objects.filter(team_id=team_id, status__in=_OPEN)
            .exclude(write_scopes=[])
            .values_list("number", "write_scopes")
        )
    out = []
    for task in tasks:
        warnings = []
        if task.pk in scoped:
            for number, scopes in board:
                if number == task.number:
                    continue
                for mine in task.write_scopes:
                    theirs = next((s for s in scopes if _scopes_overlap(mine, s)), None)
                    if theirs is not None:
                        warnings.append(f"write scope {mine!r} overlaps task-{number}'s {theirs!r}")
        out.append(task_out(task, warnings=warnings))
    return out


def task_out(task: Task, *, warnings: list[str] | None = None) -> dict:
    has_open = getattr(task, "has_open_blocker", None)
    blockers = list(task.blocked_by.all())
    if has_open is None:
        has_open = any(b.status not in (TaskStatus.COMPLETED, TaskStatus.DELETED) for b in blockers)
    return TaskOut(
        id=task.public_id,
        revision=task.revision,
        subject=task.subject,
        description=task.description,
        status=task.status,
        owner=task.owner.name if task.owner_id else None,
        blocked_by=[b.public_id for b in sorted(blockers, key=lambda b: b.number)],
        write_scopes=list(task.write_scopes),
        ready=task.status == TaskStatus.PENDING and not has_open,
        warnings=warnings or [],
    ).model_dump()


def task_blocking(task: Task) -> list[str]:
    """What blocks the task now: its open blockers while it is itself open (the dashboard's
    board shows these; ``blocked_by`` keeps every dependency, done or not)."""
    if task.status not in _OPEN:
        return []
    blockers = sorted(task.blocked_by.all(), key=lambda b: b.number)
    return [b.public_id for b in blockers if b.status not in (TaskStatus.COMPLETED, TaskStatus.DELETED)]


def task_get(*, team_id: int, task_id: str) -> Task:
    number = int(task_id.removeprefix("task-"))
    task = tasks_with_ready(Task.objects.filter(team_id=team_id, number=number)).first()
    if task is None:
        raise TeamError(ErrorCode.TASK_NOT_FOUND, f"No task {task_id} on this team's board.")
    return task


def _cursor_decode(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        return int(cursor_decode(cursor))
    except ValueError:
        raise cursor_refused()


def _cursor_encode(number: int) -> str:
    return cursor_encode(str(number))


def task_list(
    *,
    team_id: int,
    status: str | None = None,
    owner: str | None = None,
    ready: bool | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[Task], str | None]:
    qs = Task.objects.filter(team_id=team_id, number__gt=_cursor_decode(cursor))
    qs = qs.filter(status=status) if status else qs.exclude(status=TaskStatus.DELETED)
    if owner == "unowned":
        qs = qs.filter(owner__isnull=True)
    elif owner:
        qs = qs.filter(owner__name=owner)
    qs = tasks_with_ready(qs)
    if ready is True:
        qs = qs.filter(status=TaskStatus.PENDING, has_open_blocker=False)
    elif ready is False:
        qs = qs.exclude(status=TaskStatus.PENDING, has_open_blocker=False)
    page = list(qs.order_by("number")[: limit + 1])
    next_cursor = _cursor_encode(page[limit - 1].number) if len(page) > limit else None
    return page[:limit], next_cursor
