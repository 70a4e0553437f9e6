"""An A2A task whose member asks a person (ask_human; issue 28 item 2): while the ask made in
the task's turn waits, the task is TASK_STATE_INPUT_REQUIRED with the question as its status
message; the caller's message on that task (its taskId) answers the ask, which reaches the
member's session as the answer's steer; then the task is working again. On the real ASGI
application, the test run's database and a session on the real websocket consumer."""
import pytest
from channels.db import database_sync_to_async

from delegation.credentials import credential_create
from mailbox.models import HumanAsk
from tests.delegation.support import rpc, send_params
from tests.support.inproc import Agent, spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/a2a/alpha/worker/"


@database_sync_to_async
def credential(name: str) -> str:
    return credential_create(name=name, teams=["alpha"])[1]


async def get_task(api, token: str, task_id: str) -> dict:
    answer = await rpc(api.http, token, "GetTask", {"id": task_id}, path=PATH)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def on_task(task_id: str, text: str) -> dict:
    params = send_params(text, message_id=f"answer-{text}")
    params["message"]["taskId"] = task_id
    return params


async def worker_idle(api) -> tuple[str, Agent]:
    """Team alpha's member ``worker``, its session connected and idle: its token and its session."""
    team = await team_new()
    worker_token = await spawn(api, team["lead"], "alpha", "worker")
    worker = Agent(worker_token)
    await worker.connect("idle")
    return worker_token, worker


async def task_working(api, token: str, worker: Agent, text: str) -> str:
    """A task sent to the worker, whose session starts the prompt's turn: the task's id, once it is working."""
    sent = await rpc(api.http, token, "SendMessage", send_params(text), path=PATH)
    task_id = sent.json()["result"]["task"]["id"]
    prompt = (await worker.expect("prompt"))["prompt"]
    for entry in (
        {"id": "t1", "kind": "turn_start", "turn_id": "T1", "step": 0, "cause": "prompt"},
        {"id": "p1", "kind": "prompt", "turn_id": "T1", "step": 0, "prompt_id": prompt["id"], "text": prompt["content"]},
    ):
        await worker.send({"type": "entry", "entry": entry})
        await worker.expect("ack")
    assert (await get_task(api, token, task_id))["status"]["state"] == "TASK_STATE_WORKING"
    return task_id


async def test_a_task_waits_for_input_while_its_member_asks_and_the_callers_message_answers(api):
    worker_token, worker = await worker_idle(api)
    token = await credential("planner")

    task_id = await task_working(api, token, worker, "Migrate the database.")

    asked = await api.ok(worker_token, "ask_human", question="Drop the old table too?", options=["yes", "no"])
    waiting = await get_task(api, token, task_id)
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert waiting["status"]["message"]["parts"][0]["text"] == "Drop the old table too?"
    listed = await rpc(api.http, token, "ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"}, path=PATH)
    assert [t["id"] for t in listed.json()["result"]["tasks"]] == [task_id]

    answered = await rpc(api.http, token, "SendMessage", on_task(task_id, "no"), path=PATH)
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", answered.text
    steer = (await worker.expect("steer"))["message"]
    assert (steer["kind"], steer["ask_id"], steer["decision"], steer["answered_by"]) == (
        "human_answer", asked["ask_id"], "no", "planner@a2a")
    row = await database_sync_to_async(HumanAsk.objects.get)(pk=asked["ask_id"])
    assert (row.state, row.decision, row.answered_by) == ("answered", "no", "planner@a2a")

    # Nothing waits for input now: a message on the task is refused, and stores nothing.
    refused = await rpc(api.http, token, "SendMessage", on_task(task_id, "and another thing"), path=PATH)
    assert "error" in refused.json(), refused.text
    assert "not waiting for input" in refused.json()["error"]["message"]
    assert await worker.nothing("steer")
    await worker.close()


async def test_an_ask_made_before_the_tasks_turn_leaves_the_task_working_and_words_answer_an_open_question(api):
    worker_token, worker = await worker_idle(api)
    token = await credential("planner")
    earlier = await api.ok(worker_token, "ask_human", question="An older question?")

    task_id = await task_working(api, token, worker, "Write the report.")

    asked = await api.ok(worker_token, "ask_human", question="Which quarter?")
    assert (await get_task(api, token, task_id))["status"]["message"]["parts"][0]["text"] == "Which quarter?"
    answered = await rpc(api.http, token, "SendMessage", on_task(task_id, "Q3, please"), path=PATH)
    assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", answered.text
    steer = (await worker.expect("steer"))["message"]
    assert (steer["ask_id"], steer["decision"], steer["answer"]) == (asked["ask_id"], None, "Q3, please")
    older = await database_sync_to_async(HumanAsk.objects.get)(pk=earlier["ask_id"])
    assert older.state == "pending"  # not the task's: the caller answers only what its task waits on
    await worker.close()
