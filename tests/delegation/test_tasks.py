"""delegation/tasks.py and credentials.py on the real database: an A2A task's state is
read from its prompt and the member's history, and only the right callers get in."""
import json
from mailbox import sessions
from mailbox.models import HumanPrompt, PromptState

import pytest
from a2a.types import a2a_pb2 as pb
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts.operators import operator_role_set
from accounts.tokens import operator_token_create
from delegation.credentials import caller_for_team, credential_create, credential_revoke
from delegation.handler import _changes
from delegation.models import DelegatedTask
from delegation.tasks import task_cancel, task_read, task_row, task_send
from teams.errors import TeamError
from teams.services import member_fail, member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def crew():
    team, lead, lead_token, _ = team_create(name="crew")
    worker = member_spawn(lead=lead, name="worker", description="does the work", prompt="")
    sessions.session_hello(member_id=worker.pk, state="idle", channel="test.worker")
    _, token = credential_create(name="planner", teams=["crew"])
    return team, lead, lead_token, worker, token


def report(worker, **entry):
    sessions.session_entry(member=worker, entry=entry)


def read(task: DelegatedTask):
    return task_read(task_row(task.pk))


def test_a_task_is_submitted_then_working_then_completed_with_the_turns_last_text(crew):
    team, _, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)
    task = task_send(member=worker, caller=caller, content="Plan it.", context_id="ctx-1")
    prompt = HumanPrompt.objects.get(pk=task.prompt_id)
    assert prompt.author.username == "planner@a2a" and prompt.pushed_at is not None
    assert read(task).state == "submitted"

    report(worker, id="t0", kind="turn_start", turn_id="T1", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T1", step=0, prompt_id=prompt.pk, text="Plan it.")
    assert read(task).state == "working"
    report(worker, id="a0", kind="assistant_text", turn_id="T1", step=0, text="first thoughts")
    report(worker, id="a1", kind="assistant_text", turn_id="T1", step=1, text="The plan.")
    report(worker, id="e0", kind="turn_end", turn_id="T1", step=1, reason="done")
    view = read(task)
    assert (view.state, view.answer) == ("completed", "The plan.")
    # Final is final: what the history says later does not change it.
    report(worker, id="e1", kind="turn_end", turn_id="T1", step=2, reason="error", error="late")
    assert read(task).state == "completed"
    assert DelegatedTask.objects.get(pk=task.pk).answer == "The plan."


def test_a_turn_that_fails_fails_its_task_with_the_reason(crew):
    team, _, _, worker, token = crew
    task = task_send(member=worker, caller=caller_for_team(token=token, team=team), content="go", context_id="c")
    report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=task.prompt_id, text="go")
    report(worker, id="e0", kind="turn_end", turn_id="T", step=0, reason="error", error="RuntimeError: no model")
    view = read(task)
    assert (view.state, view.reason) == ("failed", "RuntimeError: no model")


def test_a_member_that_cannot_be_started_fails_its_waiting_task(crew):
    team, lead, _, _, token = crew
    fresh = member_spawn(lead=lead, name="fresh", description="new", prompt="")
    task = task_send(member=fresh, caller=caller_for_team(token=token, team=team), content="hello", context_id="c")
    assert read(task).state == "submitted"
    member_fail(member_id=fresh.pk)
    view = read(task)
    assert view.state == "failed" and "could not be started" in view.reason


def test_cancel_withdraws_a_waiting_prompt_which_is_then_never_offered(crew):
    team, _, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)
    sessions.session_status(member_id=worker.pk, state="running", channel="test.worker")
    task = task_send(member=worker, caller=caller, content="later", context_id="c")
    assert HumanPrompt.objects.get(pk=task.prompt_id).pushed_at is None
    view = task_cancel(task=task_row(task.pk))
    assert view.state == "canceled"
    sessions.session_status(member_id=worker.pk, state="idle", channel="test.worker")
    prompt = HumanPrompt.objects.get(pk=task.prompt_id)
    assert prompt.state == PromptState.COMPLETED and prompt.pushed_at is None
    with pytest.raises(TeamError) as refused:
        task_cancel(task=task_row(task.pk))
    assert refused.value.code == "TASK_INVALID_ACTION"


def test_a_context_belongs_to_one_member_and_one_caller(crew):
    team, lead, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)
    task_send(member=worker, caller=caller, content="one", context_id="shared")
    with pytest.raises(TeamError):
        task_send(member=lead, caller=caller, content="two", context_id="shared")
    _, other = credential_create(name="other", teams=["crew"])
    with pytest.raises(TeamError):
        task_send(member=worker, caller=caller_for_team(token=other, team=team), content="3", context_id="shared")
    assert task_send(member=worker, caller=caller, content="four", context_id="shared").context_id == "shared"


def test_only_operators_and_credentials_for_the_team_get_in(crew):
    team, _, lead_token, _, token = crew
    other_team, _, other_lead, _ = team_create(name="other-crew")
    User = get_user_model()
    operator = User.objects.create(username="ops")
    operator_role_set(user=operator, operator=True)
    viewer = User.objects.create(username="eyes")

    assert caller_for_team(token=token, team=team).name == "planner@a2a"
    assert caller_for_team(token=operator_token_create(user=operator), team=team).name == "ops"

    def code(bearer: str, on=team) -> str:
        with pytest.raises(TeamError) as refused:
            caller_for_team(token=bearer, team=on)
        return refused.value.code

    assert code(token, on=other_team) == "FORBIDDEN"
    assert code(operator_token_create(user=viewer)) == "FORBIDDEN"
    assert code(lead_token) == "FORBIDDEN"
    assert code(other_lead) == "FORBIDDEN"
    assert code("") == "UNAUTHENTICATED"
    assert code("sba_made-up") == "UNAUTHENTICATED"
    credential_revoke(name="planner")
    assert code(token) == "UNAUTHENTICATED"


def test_the_command_creates_lists_and_revokes_credentials(crew, capsys):
    call_command("a2a_credential", "scout", "--team", "crew", "--json")
    made = json.loads(capsys.readouterr().out)
    assert made["author"] == "scout@a2a" and made["token"].startswith("sba_")
    call_command("a2a_credential", "--list", "--json")
    listed = {c["name"]: c for c in json.loads(capsys.readouterr().out)["credentials"]}
    assert listed["scout"] == {"name": "scout", "author": "scout@a2a", "teams": ["crew"], "revoked": False}
    call_command("a2a_credential", "scout", "--revoke")
    with pytest.raises(Exception, match="NOT_FOUND"):
        call_command("a2a_credential", "lost", "--team", "nowhere")
    assert not get_user_model().objects.get(username="scout@a2a").has_usable_password()


def test_a_turn_that_fell_between_two_reads_still_streams_working_before_its_end(crew):
    team, _, _, worker, token = crew
    task = task_send(member=worker, caller=caller_for_team(token=token, team=team), content="quick", context_id="c")
    before = read(task)
    report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=task.prompt_id, text="quick")
    report(worker, id="a0", kind="assistant_text", turn_id="T", step=0, text="done already")
    report(worker, id="e0", kind="turn_end", turn_id="T", step=0, reason="done")
    after = read(task)
    working, artifact, completed = _changes(before, after)
    assert working.status.state == pb.TASK_STATE_WORKING
    assert artifact.artifact.parts[0].text == "done already"
    assert completed.status.state == pb.TASK_STATE_COMPLETED
