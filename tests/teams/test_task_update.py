"""teams/services.py task_create / task_update and teams/selectors.py task_list."""
import pytest

from teams.errors import ErrorCode, TeamError
from teams.selectors import task_get, task_list, task_out
from teams.services import member_spawn, task_create, task_update, team_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def board():
    team, lead, _, _ = team_create(name="board")
    impl = member_spawn(lead=lead, name="implementer", description="a teammate", prompt="")
    research = member_spawn(lead=lead, name="researcher", description="a teammate", prompt="")
    return lead, impl, research


def new(member, subject="s", blocked_by=()):
    return task_create(member=member, subject=subject, description="d", blocked_by=list(blocked_by), write_scopes=[])


def view(member, task):
    return task_out(task_get(team_id=member.team_id, task_id=task.public_id))


def act(member, task, action, **kwargs):
    current = task_get(team_id=member.team_id, task_id=task.public_id)
    return task_update(member=member, task_id=task.public_id, expected_revision=current.revision, action=action, **kwargs)


def refused(code, fn, *args, **kwargs):
    with pytest.raises(TeamError) as exc:
        fn(*args, **kwargs)
    assert exc.value.code == code, exc.value.message
    return exc.value


def test_tasks_are_numbered_per_team_and_start_pending_and_ready(board):
    lead, impl, _ = board
    first, second = new(lead), new(impl)
    assert (first.public_id, second.public_id) == ("task-1", "task-2")
    out = view(lead, first)
    assert out | {"description": "d"} == {
        "id": "task-1",
        "revision": 1,
        "subject": "s",
        "description": "d",
        "status": "pending",
        "owner": None,
        "blocked_by": [],
        "write_scopes": [],
        "ready": True,
        "warnings": [],
    }


def test_claim_complete_reopen_release_walk_the_status_and_bump_the_revision(board):
    lead, impl, research = board
    task = new(lead)
    claimed = act(impl, task, "claim")
    assert (claimed.status, claimed.owner.name, claimed.revision) == ("in_progress", "implementer", 2)
    refused(ErrorCode.TASK_INVALID_ACTION, act, research, task, "claim")
    refused(ErrorCode.TASK_INVALID_ACTION, act, research, task, "complete")
    released = act(impl, task, "release")
    assert (released.status, released.owner) == ("pending", None)
    act(research, task, "claim")
    done = act(research, task, "complete")
    assert done.status == "completed"
    refused(ErrorCode.TASK_INVALID_ACTION, act, research, task, "claim")
    reopened = act(lead, task, "reopen")
    assert (reopened.status, reopened.owner, reopened.revision) == ("pending", None, 6)


def test_a_stale_revision_is_a_conflict_and_changes_nothing(board):
    lead, impl, _ = board
    task = new(lead)
    act(impl, task, "claim")
    error = refused(
        ErrorCode.TASK_REVISION_CONFLICT,
        task_update,
        member=lead,
        task_id="task-1",
        expected_revision=1,
        action="edit",
        subject="changed",
    )
    assert error.http_status == 409
    assert view(lead, task)["subject"] == "s"


def test_edit_changes_text_and_scopes(board):
    lead, _, _ = board
    task = new(lead)
    edited = act(lead, task, "edit", subject="new", description="more", write_scopes=["src/"])
    assert (edited.subject, edited.description, edited.write_scopes) == ("new", "more", ["src/"])
    refused(ErrorCode.VALIDATION_ERROR, act, lead, task, "edit")


def test_dependencies_gate_ready_and_claim_and_cycles_are_refused(board):
    lead, impl, research = board
    one = new(research, "research")
    two = new(impl, "implement", blocked_by=["task-1"])
    assert view(lead, two)["blocked_by"] == ["task-1"]
    assert view(lead, two)["ready"] is False
    refused(ErrorCode.TASK_INVALID_ACTION, act, impl, two, "claim")
    refused(ErrorCode.TASK_DEPENDENCY_CYCLE, act, lead, one, "set_dependencies", blocked_by=["task-2"])
    refused(ErrorCode.TASK_DEPENDENCY_CYCLE, act, lead, one, "set_dependencies", blocked_by=["task-1"])
    three = new(lead, "review", blocked_by=["task-2"])
    refused(ErrorCode.TASK_DEPENDENCY_CYCLE, act, lead, one, "set_dependencies", blocked_by=["task-3"])
    refused(ErrorCode.TASK_NOT_FOUND, act, lead, three, "set_dependencies", blocked_by=["task-99"])

    act(research, one, "claim")
    act(research, one, "complete")
    assert view(lead, two)["ready"] is True
    assert view(lead, three)["ready"] is False
    assert act(impl, two, "claim").owner.name == "implementer"


def test_reassign_is_for_the_lead_only(board):
    lead, impl, research = board
    task = new(lead)
    act(impl, task, "claim")
    refused(ErrorCode.LEAD_ONLY, act, research, task, "reassign", owner="researcher")
    moved = act(lead, task, "reassign", owner="researcher")
    assert moved.owner.name == "researcher"
    refused(ErrorCode.TEAM_UNKNOWN_TARGET, act, lead, task, "reassign", owner="nobody")


def test_delete_leaves_a_tombstone_and_refuses_a_live_blocker(board):
    lead, impl, research = board
    one = new(research)
    two = new(impl, blocked_by=["task-1"])
    refused(ErrorCode.TASK_INVALID_ACTION, act, impl, one, "delete")
    # A blocker with open dependants is not deleted: that would silently unblock them.
    error = refused(ErrorCode.TASK_HAS_DEPENDANTS, act, lead, one, "delete")
    assert error.extra == {"dependants": ["task-2"]}
    assert view(lead, two)["blocked_by"] == ["task-1"] and view(lead, two)["ready"] is False
    act(impl, two, "set_dependencies", blocked_by=[])
    gone = act(lead, one, "delete")
    assert gone.status == "deleted"
    assert view(lead, one)["status"] == "deleted"  # still readable: a tombstone
    assert view(lead, two)["blocked_by"] == [] and view(lead, two)["ready"] is True
    refused(ErrorCode.TASK_INVALID_ACTION, act, lead, one, "reopen")
    refused(ErrorCode.TASK_NOT_FOUND, new, impl, "x", ["task-1"])
    listed, _ = task_list(team_id=lead.team_id)
    assert [t.public_id for t in listed] == ["task-2"]
    tombstones, _ = task_list(team_id=lead.team_id, status="deleted")
    assert [t.public_id for t in tombstones] == ["task-1"]


def test_task_list_filters_and_pages_with_a_cursor(board):
    lead, impl, _ = board
    for i in range(5):
        new(lead, f"t{i}")
    act(impl, task_get(team_id=lead.team_id, task_id="task-2"), "claim")
    page, cursor = task_list(team_id=lead.team_id, limit=2)
    assert [t.public_id for t in page] == ["task-1", "task-2"]
    page2, cursor2 = task_list(team_id=lead.team_id, limit=2, cursor=cursor)
    assert [t.public_id for t in page2] == ["task-3", "task-4"]
    page3, cursor3 = task_list(team_id=lead.team_id, limit=2, cursor=cursor2)
    assert ([t.public_id for t in page3], cursor3) == (["task-5"], None)
    mine, _ = task_list(team_id=lead.team_id, owner="implementer")
    assert [t.public_id for t in mine] == ["task-2"]
    unowned, _ = task_list(team_id=lead.team_id, owner="unowned")
    assert len(unowned) == 4
    ready, _ = task_list(team_id=lead.team_id, ready=True)
    assert [t.public_id for t in ready] == ["task-1", "task-3", "task-4", "task-5"]
    in_progress, _ = task_list(team_id=lead.team_id, status="in_progress")
    assert [t.public_id for t in in_progress] == ["task-2"]
    refused(ErrorCode.VALIDATION_ERROR, task_list, team_id=lead.team_id, cursor="!!not-a-cursor")


def test_the_board_has_a_limit(board, settings):
    lead, _, _ = board
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_TASKS_PER_TEAM": 2}
    new(lead)
    new(lead)
    refused(ErrorCode.TEAM_TASK_BOARD_FULL, new, lead)
