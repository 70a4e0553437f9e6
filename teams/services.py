"""Writes to the roster and the task board.

Every function here is a service: keyword-only arguments, one transaction,
a ``TeamError`` for every refusal. A change to the roster (a teammate spawned) or
to the board (a task created or updated) is recorded in the team's log in the
same transaction, by the recorder the mailbox hands this module when its app is
ready (the Lead log, mailbox/engine/lead_log.py). Delivery is not this module's
business; ``mailbox`` builds on it.
"""
from collections.abc import Iterable
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from teams.errors import ErrorCode, TeamError
from teams.models import (
    MEMBER_NAME_RE,
    TEAM_NAME_RE,
    Context,
    Member,
    MemberToken,
    Phase,
    Role,
    SessionState,
    Task,
    TaskStatus,
    Team,
)
from teams.tokens import HOST_PREFIX, MEMBER_PREFIX, token_hash, token_new

import re


class Recorder(Protocol):
    """Writes a roster or board change into the team's log, in the caller's transaction."""

    def member_logged(self, *, team_id: int, data: dict, status: str | None = None) -> None: ...

    def task_logged(self, *, team_id: int, data: dict) -> None: ...


_recorder: Recorder | None = None


def records_to(recorder: Recorder) -> None:
    """Who records the roster's and the board's changes (mailbox/apps.py: the Lead log)."""
    global _recorder
    _recorder = recorder


def _task_recorded(*, member: Member, task: Task, action: str) -> None:
    if _recorder is not None:
        _recorder.task_logged(
            team_id=member.team_id,
            data={"task": task.public_id, "action": action, "by": member.name, "revision": task.revision},
        )


# --- teams and members ---------------------------------------------------------
def team_create(*, name: str) -> tuple[Team, Member, str, str]:
    """Create a team with its Lead; return (team, lead, lead token, host token)."""
    if not isinstance(name, str) or not re.fullmatch(TEAM_NAME_RE, name):
        raise TeamError(
            ErrorCode.VALIDATION_ERROR,
            "A team name is 1-63 characters of lower-case letters, digits, '-' or '_', starting with a letter or digit.",
        )
    host_token = token_new(HOST_PREFIX)
    try:
        with transaction.atomic():
            team = Team.objects.create(name=name, host_token_hash=token_hash(host_token))
            lead = Member.objects.create(
                team=team, name="lead", role=Role.LEAD, description="The team's Lead.", phase=Phase.ACTIVE
            )
            lead_token = member_token_create(member=lead)
    except IntegrityError:
        raise TeamError(ErrorCode.TEAM_NAME_TAKEN, f"A team named {name!r} already exists; choose another name.")
    return team, lead, lead_token, host_token


def team_host_token_replace(*, team: Team) -> str:
    """Give the team a new host token; the earlier one stops working for new connections."""
    host_token = token_new(HOST_PREFIX)
    Team.objects.filter(pk=team.pk).update(host_token_hash=token_hash(host_token))
    return host_token


def member_token_create(*, member: Member) -> str:
    """Issue a new bearer token for a member; earlier tokens stay valid."""
    token = token_new(MEMBER_PREFIX)
    MemberToken.objects.create(member=member, token_hash=token_hash(token))
    return token


def member_spawn(*, lead: Member, name: str, description: str, prompt: str, context: str = Context.FRESH) -> Member:
    """Add a teammate to the Lead's roster. Names are never reused, even after retirement."""
    if not lead.is_lead:
        raise TeamError(ErrorCode.LEAD_ONLY, "Only the Lead can spawn teammates.")
    if not re.fullmatch(MEMBER_NAME_RE, name):
        raise TeamError(ErrorCode.VALIDATION_ERROR, "A member name is lower-kebab-case, e.g. 'researcher-2'.")
    if not description.strip():
        raise TeamError(ErrorCode.VALIDATION_ERROR, "description: say what the teammate is for (it cannot be blank).")
    with transaction.atomic():
        team = Team.objects.select_for_update(no_key=True).get(pk=lead.team_id)
        if Member.objects.filter(team=team, name=name).exists():
            raise TeamError(
                ErrorCode.TEAM_NAME_TAKEN,
                f"The name {name!r} is already used in this team (names are never reused); choose another.",
            )
        # The bound counts teammates, as the seed's maxMembers does: the Lead is not one of them.
        most = settings.STEERBOARD["MAX_MEMBERS_PER_TEAM"]
        if Member.objects.filter(team=team, role=Role.TEAMMATE).count() >= most:
            raise TeamError(
                ErrorCode.TEAM_ROSTER_FULL,
                f"The team already has {most} teammates (the Lead not counted), the most it may have.",
            )
        member = Member.objects.create(
            team=team,
            name=name,
            role=Role.TEAMMATE,
            description=description,
            prompt=prompt,
            context=context,
            phase=Phase.PROVISIONING,
        )
        if _recorder is not None:
            _recorder.member_logged(
                team_id=team.pk, data={"member": member.name, "spawned_by": lead.name}, status=member.status
            )
        return member


def member_session_set(*, member_id: int, state: str, channel: str) -> tuple[Member, str]:
    """Record what a connected session says it is doing; return (member, previous status)."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).get(pk=member_id)
        previous = member.status
        member.session_state = state
        member.session_channel = channel
        member.start_requested_at = None  # the requested session is here
        if member.phase in (Phase.PROVISIONING, Phase.FAILED):
            member.phase = Phase.ACTIVE
        member.status_changed_at = timezone.now()
        member.save(
            update_fields=["session_state", "session_channel", "start_requested_at", "phase", "status_changed_at"]
        )
    return member, previous


def member_session_end(*, member_id: int, channel: str) -> Member | None:
    """A session's socket closed: the member is inactive unless a newer session took over."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).get(pk=member_id)
        if member.session_channel != channel:
            return None
        member.session_state = SessionState.INACTIVE
        member.session_channel = ""
        member.status_changed_at = timezone.now()
        member.save(update_fields=["session_state", "session_channel", "status_changed_at"])
    return member


def member_fail(*, member_id: int) -> Member:
    """The host could not start the member's session. Only provisioning can fail: a
    teammate that has run before stays inactive (its next message asks again)."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).get(pk=member_id)
        if member.phase == Phase.PROVISIONING and member.session_state == SessionState.INACTIVE:
            member.phase = Phase.FAILED
            member.status_changed_at = timezone.now()
            member.save(update_fields=["phase", "status_changed_at"])
    return member


# --- the task board -------------------------------------------------------------
def _task_numbers(ids: Iterable[str]) -> list[int]:
    numbers = [int(i.removeprefix("task-")) for i in ids]
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        names = ", ".join(f"task-{n}" for n in twice)
        raise TeamError(ErrorCode.VALIDATION_ERROR, f"blocked_by: {names} is listed more than once.")
    return sorted(numbers)


def _tasks_resolve(*, team: Team, ids: Iterable[str]) -> list[Task]:
    numbers = _task_numbers(ids)
    tasks = list(Task.objects.filter(team=team, number__in=numbers).exclude(status=TaskStatus.DELETED))
    missing = set(numbers) - {t.number for t in tasks}
    if missing:
        names = ", ".join(f"task-{n}" for n in sorted(missing))
        raise TeamError(ErrorCode.TASK_NOT_FOUND, f"No such task (or it was deleted): {names}.")
    return tasks


def task_create(
    *, member: Member, subject: str, description: str, blocked_by: list[str], write_scopes: list[str]
) -> Task:
    with transaction.atomic():
        team = Team.objects.select_for_update(no_key=True).get(pk=member.team_id)
        live = Task.objects.filter(team=team).exclude(status=TaskStatus.DELETED).count()
        if live >= settings.STEERBOARD["MAX_TASKS_PER_TEAM"]:
            raise TeamError(
                ErrorCode.TEAM_TASK_BOARD_FULL,
                f"The board already holds {settings.STEERBOARD['MAX_TASKS_PER_TEAM']} tasks; complete or delete some first.",
            )
        blockers = _tasks_resolve(team=team, ids=blocked_by)
        task = Task.objects.create(
            team=team,
            number=team.next_task_number,
            subject=subject,
            description=description,
            write_scopes=list(write_scopes),
            created_by=member,
        )
        team.next_task_number += 1
        team.save(update_fields=["next_task_number"])
        task.blocked_by.set(blockers)
        _task_recorded(member=member, task=task, action="create")
    return task


def _task_locked(*, team_id: int, task_id: str) -> Task:
    number = _task_numbers([task_id])[0]
    task = Task.objects.select_for_update().filter(team_id=team_id, number=number).first()
    if task is None:
        raise TeamError(ErrorCode.TASK_NOT_FOUND, f"No task {task_id} on this team's board.")
    return task


def _depends_on(*, start: set[int], target: int) -> bool:
    """True when ``target`` is reachable from ``start`` along blocked_by edges."""
    seen: set[int] = set()
    frontier = set(start)
    while frontier:
        if target in frontier:
            return True
        seen |= frontier
        edges = Task.blocked_by.through.objects.filter(from_task_id__in=frontier).values_list("to_task_id", flat=True)
        frontier = set(edges) - seen
    return False


def _blockers_open(task: Task) -> bool:
    return task.blocked_by.exclude(status__in=[TaskStatus.COMPLETED, TaskStatus.DELETED]).exists()


def _refuse(action: str, why: str) -> TeamError:
    return TeamError(ErrorCode.TASK_INVALID_ACTION, f"Cannot {action} this task: {why}")


def task_update(
    *,
    member: Member,
    task_id: str,
    expected_revision: int,
    action: str,
    subject: str | None = None,
    description: str | None = None,
    blocked_by: list[str] | None = None,
    write_scopes: list[str] | None = None,
    owner: str | None = None,
) -> Task:
    """Apply one action with compare-and-set on the task's revision."""
    with transaction.atomic():
        task = _task_locked(team_id=member.team_id, task_id=task_id)
        if task.revision != expected_revision:
            raise TeamError(
                ErrorCode.TASK_REVISION_CONFLICT,
                f"{task_id} is at revision {task.revision}, not {expected_revision}; read it again and retry.",
                current_revision=task.revision,
            )
        is_owner = task.owner_id == member.id
        if task.status == TaskStatus.DELETED:
            raise _refuse(action, "it was deleted.")

        if action in ("edit", "set_dependencies") and task.owner_id and not (is_owner or member.is_lead):
            raise _refuse(action, f"it is owned by {task.owner.name}; only its owner or the Lead can change it.")

        if action == "claim":
            if task.status != TaskStatus.PENDING:
                raise _refuse(action, f"it is {task.status}, only a pending task can be claimed.")
            if task.owner_id not in (None, member.id):
                raise _refuse(action, f"it is assigned to {task.owner.name}.")
            if _blockers_open(task):
                raise _refuse(action, "some of its blockers are not completed yet.")
            task.owner = member
            task.status = TaskStatus.IN_PROGRESS
        elif action == "release":
            if task.status != TaskStatus.IN_PROGRESS or not (is_owner or member.is_lead):
                raise _refuse(action, "only its owner (or the Lead) can release a task in progress.")
            task.owner = None
            task.status = TaskStatus.PENDING
        elif action == "edit":
            if subject is None and description is None and write_scopes is None:
                raise TeamError(ErrorCode.VALIDATION_ERROR, "edit needs subject, description or write_scopes.")
            if subject is not None:
                task.subject = subject
            if description is not None:
                task.description = description
            if write_scopes is not None:
                task.write_scopes = list(write_scopes)
        elif action == "set_dependencies":
            if blocked_by is None:
                raise TeamError(ErrorCode.VALIDATION_ERROR, "set_dependencies needs blocked_by (a list of task ids).")
            blockers = _tasks_resolve(team=task.team, ids=blocked_by)
            ids = {b.id for b in blockers}
            if task.id in ids or _depends_on(start=ids, target=task.id):
                raise TeamError(
                    ErrorCode.TASK_DEPENDENCY_CYCLE,
                    f"Those dependencies would make {task_id} wait on itself; the board must stay acyclic.",
                )
            task.blocked_by.set(blockers)
        elif action == "complete":
            if task.status != TaskStatus.IN_PROGRESS or not (is_owner or member.is_lead):
                raise _refuse(action, "only the owner (or the Lead) can complete a task in progress; claim it first.")
            task.status = TaskStatus.COMPLETED
        elif action == "reopen":
            if task.status != TaskStatus.COMPLETED:
                raise _refuse(action, "only a completed task can be reopened.")
            task.status = TaskStatus.PENDING
            task.owner = None
        elif action == "reassign":
            if not member.is_lead:
                raise TeamError(ErrorCode.LEAD_ONLY, "Only the Lead can reassign a task.")
            if task.status == TaskStatus.COMPLETED:
                raise _refuse(action, "it is completed; reopen it first.")
            if owner is None:
                task.owner = None
                task.status = TaskStatus.PENDING
            else:
                if _blockers_open(task):
                    raise _refuse(action, "some of its blockers are not completed yet.")
                new_owner = Member.objects.filter(team_id=member.team_id, name=owner).first()
                if new_owner is None:
                    raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {owner!r} on this team.")
                if new_owner.phase == Phase.RETIRED:
                    raise TeamError(ErrorCode.TEAM_TARGET_RETIRED, f"{owner} is retired and cannot own tasks.")
                # As the seed does, the new owner gets it as its task in progress: a pending task
                # starts (the owner may complete it at the revision reassign answers), an
                # in-progress one stays in progress.
                task.owner = new_owner
                task.status = TaskStatus.IN_PROGRESS
        elif action == "delete":
            if not (member.is_lead or is_owner or task.created_by_id == member.id):
                raise _refuse(action, "only its creator, its owner or the Lead can delete it.")
            waiting = sorted(
                task.blocks.exclude(status__in=[TaskStatus.COMPLETED, TaskStatus.DELETED]).values_list(
                    "number", flat=True
                )
            )
            if waiting and task.status != TaskStatus.COMPLETED:
                names = [f"task-{n}" for n in waiting]
                raise TeamError(
                    ErrorCode.TASK_HAS_DEPENDANTS,
                    f"Cannot delete {task_id}: {', '.join(names)} wait on it. Complete it, or change their "
                    "dependencies (set_dependencies) first.",
                    dependants=names,
                )
            task.status = TaskStatus.DELETED
            # Deleted tasks stay as tombstones but leave the dependency graph.
            dependants = list(task.blocks.all())
            task.blocks.clear()
            task.blocked_by.clear()
            for dependant in dependants:
                Task.objects.filter(pk=dependant.pk).update(revision=dependant.revision + 1)
        else:  # pydantic already restricts this; kept for direct callers.
            raise TeamError(ErrorCode.VALIDATION_ERROR, f"Unknown task action {action!r}.")

        task.revision += 1
        task.save()
        _task_recorded(member=member, task=task, action=action)
    return task
