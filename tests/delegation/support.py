"""Driving a member's A2A endpoint with the official ``a2a-sdk`` client."""
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb


def http(token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)


async def client_for(http_client: httpx.AsyncClient, agent_url: str, *, streaming: bool = True, polling: bool = False,
                     binding: str | None = None):
    """Resolve the agent's card and make an SDK client from it."""
    card = await A2ACardResolver(http_client, agent_url).get_agent_card()
    config = ClientConfig(httpx_client=http_client, streaming=streaming, polling=polling)
    if binding:
        config.supported_protocol_bindings = [binding]
        config.use_client_preference = True
    return card, ClientFactory(config).create(card)


def message(text: str, context_id: str = "") -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(role=pb.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id,
                           parts=[pb.Part(text=text)])
    )


def state_name(state: int) -> str:
    return pb.TaskState.Name(state)


async def collect(stream) -> list[pb.StreamResponse]:
    return [event async for event in stream]


def task_of(events: list[pb.StreamResponse]) -> pb.Task:
    return next(e.task for e in events if e.HasField("task"))


def statuses(events: list[pb.StreamResponse]) -> list[pb.TaskStatus]:
    """The task's statuses a stream carried, in order: its task's own (the first event; on a
    loaded machine it may already be past SUBMITTED), then each status update's."""
    out = []
    for event in events:
        if event.HasField("task"):
            out.append(event.task.status)
        elif event.HasField("status_update"):
            out.append(event.status_update.status)
    return out


def states(events: list[pb.StreamResponse]) -> list[str]:
    return [state_name(status.state) for status in statuses(events)]


def artifact_texts(events: list[pb.StreamResponse]) -> list[str]:
    """The texts of the artifacts a stream carried: in artifact updates, or in its task
    itself when the task was final already as the stream first showed it (a turn that
    ended between the send and the send's read of its task, as on a loaded machine)."""
    artifacts = [
        a for e in events for a in (
            [e.artifact_update.artifact] if e.HasField("artifact_update") else e.task.artifacts if e.HasField("task") else []
        )
    ]
    return [p.text for a in artifacts for p in a.parts if p.text]


# --- in-process: the A2A bindings as raw HTTP on the real ASGI application ------------------------
A2A_VERSION = {"A2A-Version": "1.0"}


def rpc_body(method: str, params: dict, rpc_id: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def send_params(text: str, *, context_id: str = "", message_id: str = "m-1") -> dict:
    """SendMessage's params: a message that returns at once with its task."""
    message = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
    if context_id:
        message["contextId"] = context_id
    return {"message": message, "configuration": {"returnImmediately": True}}


async def rpc(http: httpx.AsyncClient, token: str, method: str, params: dict, *, path: str, content: bytes | None = None):
    """A JSON-RPC call to ``path`` (``/a2a/<team>/<member>/``), or ``content`` as the raw body."""
    headers = {**A2A_VERSION, "Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if content is not None:
        return await http.post(path, content=content, headers=headers)
    return await http.post(path, json=rpc_body(method, params), headers=headers)


def steerboard_code(error: dict) -> str | None:
    """The Steerboard error code an A2A error carries (JSON-RPC ``error.data``, or the
    HTTP+JSON binding's ``error.details``: the ErrorInfo metadata)."""
    data = error.get("data", error.get("details"))
    if isinstance(data, dict):
        return data.get("code")
    for detail in data or []:
        if isinstance(detail, dict) and isinstance(detail.get("metadata"), dict) and "code" in detail["metadata"]:
            return detail["metadata"]["code"]
    return None
