"""delegation/tasks.py and credentials.py on the real database: an A2A task's state is
read from its prompt and the member's history, and only the right callers get in."""
import json
from mailbox.engine import hot_path
from mailbox.members import sessions
from mailbox.models import HistoryEntry, HumanPrompt, PromptState

import pytest
from a2a.types import a2a_pb2 as pb
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts.operators import operator_role_set
from accounts.tokens import operator_token_create
from delegation.credentials import caller_for_team, credential_create, credential_revoke
from delegation.handler import _changes
from delegation.models import DelegatedTask
from delegation.tasks import task_cancel, task_read, task_row, task_send, tasks_of_caller
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
    hot_path.entry_record(member=worker, entry=entry)


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


# --- what a read costs (issue 26, item 2) -----------------------------------------------------------
def history_fill(member, count: int) -> None:
    """``count`` entries of finished turns, one of them a human prompt's each."""
    rows = []
    for i in range(count):
        turn, step = divmod(i, 10)
        kind = {0: "turn_start", 1: "prompt", 9: "turn_end"}.get(step, "assistant_text")
        rows.append(HistoryEntry(member=member, entry_id=f"fill-{i}", kind=kind, data={"turn_id": f"fill-{turn}"},
                                 prompt_id=f"prompt-fill-{turn}" if kind == "prompt" else None))
    HistoryEntry.objects.bulk_create(rows, batch_size=1000)
    if connection.vendor == "postgresql":
        # The statistics autovacuum gathers once rows like these are in: without them PostgreSQL
        # costs every index of the history as if the table were empty, and a plan read from a
        # new test database depends on whether autovacuum came by first.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE mailbox_historyentry")


def history_reads(queries) -> list[str]:
    return [q["sql"] for q in queries if "mailbox_historyentry" in q["sql"]]


def test_listing_tasks_costs_the_same_queries_however_many_tasks_and_entries(crew):
    team, _, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)
    history_fill(worker, 500)
    done = task_send(member=worker, caller=caller, content="first", context_id="c")
    report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=done.prompt_id, text="first")
    report(worker, id="e0", kind="turn_end", turn_id="T", step=0, reason="done")
    assert read(done).state == "completed"

    def queries_listing() -> int:
        with CaptureQueriesContext(connection) as seen:
            views, _ = tasks_of_caller(caller=caller, member=worker, limit=100)
        assert {v.state for v in views} <= {"completed", "submitted"}
        return len(seen.captured_queries)

    task_send(member=worker, caller=caller, content="waiting", context_id="w")
    few = queries_listing()
    for n in range(30):  # more waiting tasks, each read by what its prompt's entry says
        task_send(member=worker, caller=caller, content=f"job {n}", context_id=f"c{n}")
    assert queries_listing() == few == 2  # the tasks, then one lookup of every waiting prompt's entry


def test_a_tasks_history_lookups_are_answered_by_the_history_indexes(crew):
    """A waiting task's prompt entry, and whether its running turn has ended, are index
    lookups (history_prompt_entry, history_turn_bounds), not a walk through the member's history."""
    team, lead, _, worker, token = crew
    history_fill(worker, 2000)
    task = task_send(member=worker, caller=caller_for_team(token=token, team=team), content="go", context_id="c")
    report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=task.prompt_id, text="go")
    # The team went on meanwhile: the entries since the prompt are mostly other members'.
    history_fill(lead, 2000)
    with CaptureQueriesContext(connection) as seen:
        assert read(task).state == "working"
    lookups = history_reads(seen.captured_queries)
    assert len(lookups) == 2, lookups
    plans = [explain(sql) for sql in lookups]
    assert "history_prompt_entry" in plans[0], plans[0]
    assert "history_turn_bounds" in plans[1], plans[1]


def explain(sql: str) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
            cursor.execute("EXPLAIN " + sql)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_a_final_task_is_read_from_its_row_with_its_tool_results(crew):
    team, _, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)
    task = task_send(member=worker, caller=caller, content="use a tool", context_id="c", with_tool_results=True)
    report(worker, id="t0", kind="turn_start", turn_id="T", step=0)
    report(worker, id="p0", kind="prompt", turn_id="T", step=0, prompt_id=task.prompt_id, text="use a tool")
    report(worker, id="r0", kind="tool_result", turn_id="T", step=0, tool="list_agents", call_id="c1", result={"n": 1})
    report(worker, id="a0", kind="assistant_text", turn_id="T", step=1, text="used it")
    report(worker, id="e0", kind="turn_end", turn_id="T", step=1, reason="done")
    settled = read(task)
    assert settled.tool_results == [{"tool": "list_agents", "call_id": "c1", "result": {"n": 1}}]
    with CaptureQueriesContext(connection) as seen:
        again = read(task)
    assert (again.state, again.answer, again.tool_results) == ("completed", "used it", settled.tool_results)
    assert history_reads(seen.captured_queries) == []


def test_a_send_whose_task_cannot_be_stored_leaves_no_prompt_behind(crew, monkeypatch):
    """The prompt and its task are stored together or not at all (issue 26, item 3): a
    failure after the prompt (the task's INSERT fails, injected) leaves no prompt for the
    member to work on, and nothing was offered to its session."""
    team, _, _, worker, token = crew
    caller = caller_for_team(token=token, team=team)

    def broken(**fields):
        raise DataError("value too long for type character varying(64)")

    monkeypatch.setattr(DelegatedTask.objects, "create", broken)
    with pytest.raises(DataError):
        task_send(member=worker, caller=caller, content="do it", context_id="c")
    assert HumanPrompt.objects.count() == 0
    monkeypatch.undo()
    # The member is offered the next prompt as if nothing happened.
    task = task_send(member=worker, caller=caller, content="do it", context_id="c")
    assert HumanPrompt.objects.get().pk == task.prompt_id
    assert HumanPrompt.objects.get().pushed_at is not None
