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


def states(events: list[pb.StreamResponse]) -> list[str]:
    out = []
    for event in events:
        if event.HasField("task"):
            out.append(state_name(event.task.status.state))
        elif event.HasField("status_update"):
            out.append(state_name(event.status_update.status.state))
    return out


def artifact_texts(events: list[pb.StreamResponse]) -> list[str]:
    return [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts if p.text]
