"""The task board's rules as the seed has them (issue 18): ownership, reassign, validation, scopes."""
import pytest
from pydantic import ValidationError

from teams import schemas
from teams.errors import ErrorCode
from teams.selectors import task_get, tasks_out
from teams.services import task_update
from tests.teams.test_task_update import act, board, new, refused  # noqa: F401 (board is a fixture)

pytestmark = pytest.mark.django_db


def test_only_the_owner_or_the_lead_changes_a_claimed_task(board):
    lead, impl, research = board
    task = new(lead)
    act(impl, task, "claim")
    refused(ErrorCode.TASK_INVALID_ACTION, act, research, task, "edit", subject="mine now")
    refused(ErrorCode.TASK_INVALID_ACTION, act, research, task, "set_dependencies", blocked_by=[])
    assert task_get(team_id=lead.team_id, task_id="task-1").subject == "s"
    assert act(impl, task, "edit", subject="by the owner").subject == "by the owner"
    assert act(lead, task, "edit", subject="by the lead").subject == "by the lead"
    # An unclaimed task is anyone's to edit.
    other = new(lead)
    assert act(research, other, "edit", subject="shared").subject == "shared"


def test_reassign_hands_the_task_over_as_it_is(board):
    lead, impl, research = board
    task = new(lead)
    act(impl, task, "claim")
    moved = act(lead, task, "reassign", owner="researcher")
    assert (moved.status, moved.owner.name) == ("in_progress", "researcher")
    # The new owner completes it without claiming it again; the old one no longer can.
    refused(ErrorCode.TASK_INVALID_ACTION, act, impl, task, "complete")
    assert act(research, task, "complete").status == "completed"


def test_reassigning_a_pending_task_makes_it_the_new_owners_task_in_progress(board):
    lead, impl, _ = board
    task = new(lead)
    moved = act(lead, task, "reassign", owner="implementer")
    assert (moved.status, moved.owner.name, moved.revision) == ("in_progress", "implementer", 2)
    # The owner completes it at the revision reassign answered, without claiming it.
    done = task_update(member=impl, task_id=task.public_id, expected_revision=moved.revision, action="complete")
    assert (done.status, done.revision) == ("completed", 3)


def test_reassign_with_no_owner_still_releases_the_task_to_pending(board):
    lead, impl, _ = board
    task = new(lead)
    act(impl, task, "claim")
    released = act(lead, task, "reassign")
    assert (released.status, released.owner) == ("pending", None)


def test_a_task_with_open_blockers_is_not_reassigned(board):
    lead, impl, _ = board
    blocker = new(lead)
    blocked = new(lead, blocked_by=["task-1"])
    refused(ErrorCode.TASK_INVALID_ACTION, act, lead, blocked, "reassign", owner="implementer")
    act(impl, blocker, "claim")
    act(impl, blocker, "complete")
    moved = act(lead, blocked, "reassign", owner="implementer")
    assert (moved.status, moved.owner.name) == ("in_progress", "implementer")


def test_a_completed_blocker_can_be_deleted(board):
    lead, impl, _ = board
    blocker = new(lead)
    new(lead, blocked_by=["task-1"])
    act(impl, blocker, "claim")
    act(impl, blocker, "complete")
    assert act(lead, blocker, "delete").status == "deleted"


def test_a_blocker_listed_twice_is_refused_in_set_dependencies_too(board):
    lead, _, _ = board
    new(lead)
    task = new(lead)
    error = refused(ErrorCode.VALIDATION_ERROR, act, lead, task, "set_dependencies", blocked_by=["task-1", "task-1"])
    assert "task-1" in error.message
    with pytest.raises(ValidationError, match="listed more than once"):
        schemas.TaskUpdateArgs(task_id="task-2", expected_revision=1, action="set_dependencies", blocked_by=["task-1"] * 2)


@pytest.mark.parametrize(
    "scope", [".", "..", "./", "../a", "/root", "C:\\root", "C:root", "a//b", "a/../b", "a/./b", "././a", "a//", "a\\b"]
)
def test_write_scopes_are_clean_relative_paths(scope):
    with pytest.raises(ValidationError) as exc:
        schemas.TaskCreateArgs(subject="s", description="d", write_scopes=[scope])
    assert exc.value.errors()[0]["loc"][0] == "write_scopes"


@pytest.mark.parametrize("scope", ["src", "src/api", "docs/*.md", "a.b/c-d_e", "src/**"])
def test_relative_scopes_and_globs_are_taken(scope):
    assert schemas.TaskCreateArgs(subject="s", description="d", write_scopes=[scope]).write_scopes == [scope]


@pytest.mark.parametrize(
    ("scope", "stored"), [("./src", "src"), ("src/", "src"), ("./src/api/", "src/api"), ("./docs/*.md", "docs/*.md")]
)
def test_a_leading_dot_slash_and_a_trailing_slash_are_normalised_away(scope, stored):
    assert schemas.TaskCreateArgs(subject="s", description="d", write_scopes=[scope]).write_scopes == [stored]


def test_write_scopes_listed_twice_are_kept_once_as_the_seed_does():
    args = schemas.TaskCreateArgs(subject="s", description="d", write_scopes=["src", "./src/", "docs", "src"])
    assert args.write_scopes == ["src", "docs"]
    edit = schemas.TaskUpdateArgs(task_id="task-1", expected_revision=1, action="edit", write_scopes=["a/", "a"])
    assert edit.write_scopes == ["a"]


@pytest.mark.parametrize(
    "fields",
    [
        {"subject": ""},
        {"subject": "   "},
        {"subject": "x" * 201},
        {"description": ""},
        {"description": "\n\t "},
        {"write_scopes": ["src", "../src"]},
    ],
)
def test_task_fields_are_validated_as_the_seed_does(fields):
    with pytest.raises(ValidationError):
        schemas.TaskCreateArgs(**{"subject": "s", "description": "d", **fields})
    assert schemas.TaskCreateArgs(subject="x" * 200, description="d").subject == "x" * 200


def test_the_task_view_warns_of_overlapping_write_scopes(board):
    from teams.services import task_create

    lead, impl, _ = board
    task_create(member=lead, subject="api", description="d", blocked_by=[], write_scopes=["src/api"])
    task_create(member=lead, subject="all", description="d", blocked_by=[], write_scopes=["src"])
    task_create(member=lead, subject="docs", description="d", blocked_by=[], write_scopes=["docs/*.md"])
    views = {t["id"]: t for t in tasks_out([task_get(team_id=lead.team_id, task_id=f"task-{n}") for n in (1, 2, 3)], team_id=lead.team_id)}
    assert views["task-1"]["warnings"] == ["write scope 'src/api' overlaps task-2's 'src'"]
    assert views["task-2"]["warnings"] == ["write scope 'src' overlaps task-1's 'src/api'"]
    assert views["task-3"]["warnings"] == []
    # A completed task no longer warns anyone.
    act(impl, task_get(team_id=lead.team_id, task_id="task-2"), "claim")
    act(impl, task_get(team_id=lead.team_id, task_id="task-2"), "complete")
    assert tasks_out([task_get(team_id=lead.team_id, task_id="task-1")], team_id=lead.team_id)[0]["warnings"] == []
