"""A stream of sends through one daphne process to sessions on another, with a
dependency taken away mid-stream (tests/e2e/test_infra_faults.py).

The sender behaves as docs/api.md asks of a client: one send at a time per
target (so the target's seq order is the send order), each with an
``idempotency_key`` (``keyed``; without one a send takes the writer's hot
path, where a lost doorbell leaves it accepted, not queued); a 503 ``SERVICE_UNAVAILABLE`` or a 429
``TEAM_MAILBOX_FULL`` is answered by sending the same call again after a
short pause. Everything else that is not a 200 is recorded as a failure.
"""
import asyncio
import time
import uuid
from dataclasses import dataclass, field

import httpx


@dataclass
class Send:
    target: str
    message_id: str
    answered_at: float  # monotonic


@dataclass
class StreamResult:
    sent: dict[str, list[str]] = field(default_factory=dict)  # target -> message ids in send order
    sends: list[Send] = field(default_factory=list)
    unavailable: list[httpx.Response] = field(default_factory=list)  # the 503s
    full: int = 0  # 429 TEAM_MAILBOX_FULL answers (backpressure, sent again)
    failures: list[tuple[int, str]] = field(default_factory=list)  # any other non-200
    transport_errors: int = 0


async def send_until_stored(client: httpx.AsyncClient, base_url: str, token: str, target: str, content: str,
                            result: StreamResult, keyed: bool = True) -> str:
    body = {"target": target, "message": content}
    if keyed:  # without a key a send takes the writer's hot path (admitted in its commit)
        body["idempotency_key"] = uuid.uuid4().hex
    while True:
        try:
            response = await client.post(
                f"{base_url}/api/v1/tools/send_message",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.HTTPError:
            result.transport_errors += 1
            await asyncio.sleep(0.1)
            continue
        if response.status_code == 200:
            return response.json()["message_id"]
        if response.status_code == 503:
            result.unavailable.append(response)
            await asyncio.sleep(0.1)  # Retry-After is an upper bound worth honouring; the test wants precision
            continue
        if response.status_code == 429:
            result.full += 1
            await asyncio.sleep(0.2)
            continue
        result.failures.append((response.status_code, response.text[:300]))
        await asyncio.sleep(0.1)


async def stream(base_url: str, token: str, targets: list[str], per_target: int, interval: float,
                 result: StreamResult, prefix: str = "", keyed: bool = True) -> None:
    """``per_target`` sends to each target, one every ``interval`` seconds per target (at most)."""
    for t in targets:
        result.sent.setdefault(t, [])

    async def one_target(client, target: str) -> None:
        for i in range(per_target):
            started = time.monotonic()
            message_id = await send_until_stored(
                client, base_url, token, target, f"{prefix}{target} #{i}", result, keyed
            )
            result.sent[target].append(message_id)
            result.sends.append(Send(target, message_id, time.monotonic()))
            pause = interval - (time.monotonic() - started)
            if pause > 0:
                await asyncio.sleep(pause)

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(one_target(client, t) for t in targets))


def recovery_seconds(result: StreamResult, agents: dict, down_at: float, back_at: float) -> float:
    """How long after the dependency came back the sessions had every message not
    yet delivered when it went away: per message, its ack's time less the later of
    its answer and the return; the largest of those. A stall shows as a large value."""
    worst = 0.0
    for send in result.sends:
        acked = agents[send.target].acked_at.get(send.message_id)
        if acked is None:
            return float("inf")
        if acked < down_at:
            continue
        worst = max(worst, acked - max(send.answered_at, back_at))
    return worst
