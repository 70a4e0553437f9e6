"""``LOG_FORMAT=json`` (config/log_format.py, issue 29 item 3): one JSON object per line, naming
the team and member a websocket or tool call speaks for, and the message a line is about."""
import io
import json
import logging

import pytest

from config.log_format import JsonFormatter
from mailbox.plumbing import faults
from mailbox.transports import tools
from tests.support.inproc import Agent, spawn, team_new, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def json_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)


async def test_a_failed_tool_call_on_a_websocket_logs_its_team_and_member(api, json_lines, monkeypatch):
    team = await team_new()
    lead = Agent(team["lead"])
    await lead.connect("running")

    async def broken(member, args):  # the fault, injected on purpose
        raise RuntimeError("the board is on fire")

    monkeypatch.setattr(tools, "TOOLS", {**tools.TOOLS, "team_task_list": tools.TOOLS["team_task_list"].__class__(
        **{**tools.TOOLS["team_task_list"].__dict__, "run": broken})})
    await lead.send({"type": "tool", "id": "c1", "name": "team_task_list", "arguments": {}})
    await lead.expect("tool_result")
    [line] = [line for line in json_lines() if line["message"].startswith("tool team_task_list")]
    assert line["level"] == "WARNING" and line["logger"] == "mailbox.transports.consumers"
    assert line["team"] == "alpha" and line["member"] == "lead"
    assert "the board is on fire" in line["exception"]
    assert line["time"].endswith("Z") and isinstance(line["process"], int)
    await lead.close()


async def test_a_deferred_delivery_names_its_message(api, json_lines):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "impl")
    impl = Agent(await token_for("alpha", "impl"))
    await impl.connect("idle")
    sent = await api.ok(team["lead"], "send_message", target="impl", message="hello")
    steer = (await impl.expect("steer"))["message"]
    faults.arm("delivered_record")
    await impl.integrate(steer)
    [line] = [line for line in json_lines() if "deferred to recovery" in line["message"]]
    assert line["message_id"] == sent["message_id"]
    assert line["team"] == "alpha" and line["member"] == "impl"
    await impl.close()


def test_plain_lines_carry_no_context_fields(json_lines):
    logging.getLogger("steerboard.test").warning("nothing in particular %d", 7)
    [line] = [line for line in json_lines() if line["logger"] == "steerboard.test"]
    assert line["message"] == "nothing in particular 7"
    assert not {"team", "member", "message_id", "trace_id"} & set(line)
