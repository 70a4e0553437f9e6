"""A team on real models, without a network: the host of ``python -m steerboard_agents host --model
lead=openai:... --model '*=openai:...'`` (and the same on anthropic:), its models chosen as the command
chooses them, against the application served in-process and a local fake of the vendor's API
(tests/support/fake_models.py) that the vendor's own SDK talks to over HTTP.

Each member runs on a model name of its own, so the fake answers each member's requests from
that member's script, whatever the order in which they ask.
"""
import asyncio
import json
import logging

import pytest

from steerboard_agents import AgentSession, ModelReply, StepContext, ToolCall
from steerboard_agents.model import Usage
from tests.agents.support import Team, vendor_host
from tests.agents.test_session_folding import until
from tests.support.fake_models import Fail, FakeVendor, Reply, Tokens

pytestmark = pytest.mark.django_db(transaction=True)

VENDORS = ["openai", "anthropic"]
LEAD, WORKER = "fake-lead", "fake-worker"
ASK = "Create the task 'probe' on the board, claim it, complete it, and tell me."
REPORT = "task-1 is completed."


def _task(seen) -> dict:
    """The task in the latest tool result the request carries (team_task_create's or _update's)."""
    return seen.results[-1]["task"]


LEAD_SCRIPT = [
    Reply(text="I will bring in a worker.", tokens=Tokens(input=1200, output=80, cached=1000, written=100), calls=[
        ("spawn_teammate", {"name": "worker", "description": "does the probe task", "prompt": ""}),
        ("send_message", {"target": "worker", "message": ASK}),
        ("await_message", {"sender": "worker"}),
    ]),
    Reply(text="The worker completed the probe task.", tokens=Tokens(input=1500, output=30, cached=1200)),
]
WORKER_SCRIPT = [
    Fail(429, retry_after=1),  # the SDK waits as retry-after says, then asks again
    Reply(tokens=Tokens(input=900, output=40), calls=[
        ("team_task_create", {"subject": "probe", "description": "the lead's probe task"})]),
    Reply(tokens=Tokens(input=950, output=20, cached=900), calls=[
        ("team_task_update", lambda seen: {"task_id": _task(seen)["id"], "expected_revision": _task(seen)["revision"],
                                           "action": "claim"})]),
    Reply(tokens=Tokens(input=990, output=20, cached=950), calls=[
        ("team_task_update", lambda seen: {"task_id": _task(seen)["id"], "expected_revision": _task(seen)["revision"],
                                           "action": "complete"})]),
    Reply(text="Reporting to the lead.", tokens=Tokens(input=1010, output=25, cached=990),
          calls=[("send_message", {"target": "lead", "message": REPORT})]),
    Reply(text="Done.", tokens=Tokens(input=1050, output=5, cached=1010)),
]


@pytest.fixture
def fake(request):
    vendor = FakeVendor(request.param).start()
    yield vendor
    vendor.stop()


def host_for(team: Team, fake: FakeVendor):
    """The team's host on the fake: the Lead on one model name, everyone else on another."""
    return vendor_host(team, fake, LEAD, WORKER)


def turn_ends(entries: list[dict]) -> list[str]:
    return [e["reason"] for e in entries if e["kind"] == "turn_end"]


def usages(entries: list[dict]) -> list[tuple[str, dict]]:
    return [(e["kind"], e["usage"]) for e in entries if "usage" in e]


@pytest.mark.parametrize("fake", VENDORS, indirect=True)
async def test_a_lead_and_a_teammate_on_a_vendors_api_spawn_message_and_complete_a_task(inproc_env, served, fake,
                                                                                        caplog):
    caplog.set_level(logging.INFO, logger="steerboard_agents")  # what -v shows
    team = Team(inproc_env, served, f"real-{fake.vendor}")
    fake.script(LEAD, *LEAD_SCRIPT)
    fake.script(WORKER, *WORKER_SCRIPT)
    async with host_for(team, fake):
        await asyncio.to_thread(team.prompt, "lead", "Get the probe task done.")
        await asyncio.to_thread(team.wait_for, lambda: turn_ends(team.history("lead")) == ["done"],
                                "the Lead's turn to end", timeout=120)
        await asyncio.to_thread(team.wait_for, lambda: turn_ends(team.history("worker")) == ["done"],
                                "the worker's turn to end", timeout=60)
        assert fake.left() == {}, "every scripted answer was asked for"
        assert all(r.status in (200, 429) for r in fake.requests), [(r.model, r.status) for r in fake.requests]

        # The board and the conversation.
        [task] = (await asyncio.to_thread(team.summary))["tasks"]
        assert (task["subject"], task["status"], task["owner"]) == ("probe", "completed", "worker")
        lead = await asyncio.to_thread(team.history, "lead")
        calls = [(e["tool"], "error" in e) for e in lead if e["kind"] == "tool_result"]
        assert calls == [("spawn_teammate", False), ("send_message", False), ("await_message", False)]
        report = next(e for e in lead if e["kind"] == "user_message")
        assert (report["text"], report["source"]["sender"], report["step"]) == (REPORT, "worker", 1)
        assert [e["text"] for e in lead if e["kind"] == "assistant_text"] == [
            "I will bring in a worker.", "The worker completed the probe task."]
        worker = await asyncio.to_thread(team.history, "worker")
        assert [e["text"] for e in worker if e["kind"] == "user_message"] == [ASK]
        assert [e["tool"] for e in worker if e["kind"] == "tool_result" and "result" in e] == [
            "team_task_create", "team_task_update", "team_task_update", "send_message"]

        # Usage: one entry per model reply, the first the reply produced, with the vendor's numbers.
        assert usages(lead) == [
            ("assistant_text", Tokens(1200, 80, 1000, 100).recorded(LEAD)),
            ("assistant_text", Tokens(1500, 30, 1200).recorded(LEAD)),
        ]
        assert usages(worker) == [
            ("tool_call", Tokens(900, 40).recorded(WORKER)),
            ("tool_call", Tokens(950, 20, 900).recorded(WORKER)),
            ("tool_call", Tokens(990, 20, 950).recorded(WORKER)),
            ("assistant_text", Tokens(1010, 25, 990).recorded(WORKER)),
            ("assistant_text", Tokens(1050, 5, 1010).recorded(WORKER)),
        ]
        assert sum(r.status == 200 for r in fake.requests) == len(usages(lead)) + len(usages(worker))

        # The 429 was asked again after the retry-after it named, and the turn went on.
        first, again = fake.requests_of(WORKER)[:2]
        assert (first.status, again.status) == (429, 200)
        assert again.at - first.at >= 1.0 and again.body == first.body

        # What the Lead's model was shown for its second step: the three calls paired with their
        # results by id, and the worker's report, steered in during the step, after them.
        body = fake.requests_of(LEAD)[-1].body
        report_text = f"[message {report['source']['message_id']} from worker]\n{REPORT}"
        if fake.vendor == "openai":
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
            ids = [c["id"] for c in body["messages"][2]["tool_calls"]]
            assert [m["tool_call_id"] for m in body["messages"][3:6]] == ids
            assert body["messages"][-1]["content"] == report_text
            assert {t["function"]["name"] for t in body["tools"]} >= {"spawn_teammate", "send_message", "await_message"}
        else:
            assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
            ids = [b["id"] for b in body["messages"][1]["content"] if b["type"] == "tool_use"]
            last = body["messages"][-1]["content"]
            assert [b.get("tool_use_id") for b in last] == [*ids, None]
            assert last[-1] == {"type": "text", "text": report_text}
            assert {t["name"] for t in body["tools"]} >= {"spawn_teammate", "send_message", "await_message"}
        assert "You are lead" in json.dumps(body) and "Team policy" in json.dumps(body)
    assert "usage fake-lead: 1200 in, 1000 cached, 80 out" in caplog.text, "-v names what each reply cost"


@pytest.mark.parametrize("fake", VENDORS, indirect=True)
async def test_a_vendor_error_ends_that_turn_with_its_text_and_the_session_takes_the_next_prompt(inproc_env, served,
                                                                                                fake):
    team = Team(inproc_env, served, f"failing-{fake.vendor}")
    # --model-retries 1: the 500 is asked twice (the SDK's retry of a 5xx), then the turn ends.
    fake.script(LEAD, Fail(500, times=2), Reply(text="Back again.", tokens=Tokens(input=300, output=4)))
    async with host_for(team, fake) as host:
        await asyncio.to_thread(team.prompt, "lead", "First try.")
        await asyncio.to_thread(team.wait_for, lambda: turn_ends(team.history("lead")) == ["error"],
                                "the failed turn's end", timeout=60)
        [failed] = [e for e in await asyncio.to_thread(team.history, "lead") if e["kind"] == "turn_end"]
        assert failed["error"].startswith(f"{fake.vendor}: InternalServerError") and "500" in failed["error"]
        assert "The server had an error while processing your request" in failed["error"]
        assert [r.status for r in fake.requests_of(LEAD)] == [500, 500]
        assert not host.done(), "the host is still running"

        await asyncio.to_thread(team.prompt, "lead", "Second try.")
        await asyncio.to_thread(team.wait_for, lambda: turn_ends(team.history("lead")) == ["error", "done"],
                                "the next turn", timeout=60)
        lead = await asyncio.to_thread(team.history, "lead")
        assert [e["text"] for e in lead if e["kind"] == "assistant_text"] == ["Back again."]
        assert usages(lead) == [("assistant_text", Tokens(300, 4).recorded(LEAD))]
        # The failed turn's prompt is in what the model read for the next one.
        assert "First try." in json.dumps(fake.requests_of(LEAD)[-1].body)
        assert [r.status for r in fake.requests_of(LEAD)] == [500, 500, 200]


class Spending:
    """Replies as a model that reports usage would: text and calls, calls only, then nothing at all."""

    def __init__(self):
        self.replies = [
            ModelReply(text="Looking.", tool_calls=[ToolCall("list_agents", {}), ToolCall("team_task_list", {})],
                       usage=Usage("m-1", 100, 10, 50)),
            ModelReply(tool_calls=[ToolCall("list_agents", {})], usage=Usage("m-1", 200, 20, 150)),
            ModelReply(usage=Usage("m-1", 300, 0, 250)),
        ]

    async def step(self, context: StepContext) -> ModelReply:
        return self.replies.pop(0)


async def test_each_replys_usage_is_on_its_first_entry_and_an_empty_reply_still_records_it(inproc_env, served):
    team = Team(inproc_env, served, "usage")
    session = AgentSession(served.url, team.lead_token, Spending(), max_backoff=0.3)
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        await asyncio.to_thread(team.prompt, "lead", "go")
        await until(lambda: any(e["kind"] == "turn_end" for e in session.entries) and session.idle.is_set(), "the turn")
    finally:
        await session.stop()
        await asyncio.gather(running, return_exceptions=True)
    stored = await asyncio.to_thread(team.history, "lead")
    produced = [(e["kind"], e.get("tool"), e.get("usage", {}).get("input_tokens")) for e in stored
                if e["kind"] in ("assistant_text", "tool_call")]
    assert produced == [
        ("assistant_text", None, 100), ("tool_call", "list_agents", None), ("tool_call", "team_task_list", None),
        ("tool_call", "list_agents", 200),
        ("assistant_text", None, 300),  # an answer with neither text nor calls: an empty text carries its usage
    ]
    assert [e["text"] for e in stored if e["kind"] == "assistant_text"] == ["Looking.", ""]
    assert turn_ends(stored) == ["done"]
