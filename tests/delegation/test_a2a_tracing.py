"""An /a2a request's W3C traceparent is the parent of its A2A send's span (delegation/server.py,
mailbox/plumbing/tracing.py; issue 29 item 2), on the real ASGI application; without one the send's
span starts a trace, and with tracing off there is none."""
import pytest
from channels.db import database_sync_to_async

from delegation.credentials import credential_create
from tests.delegation.support import rpc, send_params
from tests.support.inproc import spawn, team_new
from tests.support.spans import by_name, in_memory_spans

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/a2a/alpha/worker/"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@database_sync_to_async
def credential(name: str) -> str:
    return credential_create(name=name, teams=["alpha"])[1]


async def test_an_a2a_send_continues_the_callers_trace(api):
    team = await team_new()
    await spawn(api, team["lead"], "alpha", "worker")
    token = await credential("planner")
    with in_memory_spans() as spans:
        response = await api.http.post(
            PATH, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params("traced")},
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}",
                     "traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
        )
        assert response.status_code == 200, response.text
        task = response.json()["result"]["task"]
        send = by_name(spans, "send worker")
        assert f"{send.context.trace_id:032x}" == TRACE_ID and f"{send.parent.span_id:016x}" == PARENT
        assert send.attributes["steerboard.transport"] == "a2a"
        assert send.attributes["messaging.destination.name"] == "worker"
        assert send.attributes["steerboard.a2a.task_id"] == task["id"]
        assert send.attributes["messaging.message.id"].startswith("prompt-")
        assert [event.name for event in send.events] == ["queued"]

        spans.clear()
        untraced = await rpc(api.http, token, "SendMessage", send_params("no header", message_id="m-2"), path=PATH)
        assert untraced.status_code == 200, untraced.text
        assert by_name(spans, "send worker").parent is None
        spans.clear()
    again = await rpc(api.http, token, "SendMessage", send_params("tracing off", message_id="m-3"), path=PATH)
    assert again.status_code == 200 and spans.get_finished_spans() == ()
