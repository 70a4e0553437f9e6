"""What a sender is told: ``send_message``'s answer and its ``delivery`` observation.

Observations, not promises (docs/protocol.md): ``accepted`` means the target's
inbox took the message, never that the target took on the work it asks for;
``expected`` and ``warnings`` say in words what happens next, from what
admission saw (mailbox/engine/delivery.py) or, on the hot path, what its one
statement returned (mailbox/engine/hot_path.py).
"""
from django.utils import timezone

from mailbox.engine import starts
from mailbox.engine.delivery import SESSIONLESS, Admission, target_waits
from mailbox.models import MessageState, TeamMessage
from teams.errors import ErrorCode
from teams.models import Status
from teams.wire_format import iso


def send_answer(
    *, message_id: str, thread_id: str, team_id: int, target_name: str, state: str, admission: Admission
) -> dict:
    """The sender's answer to send_message: the message, its state and what admission saw."""
    return {
        "message_id": message_id,
        "status": "queued" if state == MessageState.QUEUED else "accepted",
        "thread_id": thread_id or message_id,
        "delivery": delivery_observation(team_id=team_id, target_name=target_name, state=state, admission=admission),
        "idempotent_replay": False,
    }


def send_answer_now(*, message_id: str) -> dict:
    """The answer to a send whose admission another call is running: what is known now."""
    message = TeamMessage.objects.select_related("target").get(pk=message_id)
    admission = Admission(
        target_status=message.target.status, admitted=[], host_connected=starts.team_has_host(message.team_id)
    )
    return send_answer(
        message_id=message.id, thread_id=message.thread_id, team_id=message.team_id, target_name=message.target.name,
        state=message.state, admission=admission,
    )


def delivery_observation(*, team_id: int, target_name: str, state: str, admission: Admission) -> dict:
    """What admission saw, for the sender: the target's status, what happens next, and warnings.

    Observations, not promises: 'accepted' means the target's inbox took the
    message, never that the target took on the work it asks for."""
    has_host = admission.host_connected
    if has_host is None:
        has_host = starts.team_has_host(team_id)
    return observation(
        target=target_name,
        status=admission.target_status,
        state=state,
        has_host=has_host,
        error=admission.error,
        code=admission.code,
    )


def observation(*, target: str, status: str, state: str, has_host: bool, error: str = "", code: str = "") -> dict:
    """``code``: why the message waits, when a sender should know it (TEAM_BUDGET_EXHAUSTED);
    the observation then carries it as ``code``."""
    warnings: list[str] = []
    if state == MessageState.DELIVERED:
        expected = f"{target} already has the message in its history."
    elif code == ErrorCode.TEAM_BUDGET_EXHAUSTED:
        expected = "The message waits in the durable mailbox until an operator raises the team's token budget."
        warnings.append(error)
    elif target_waits(status=status, has_host=has_host):
        expected = f"The message waits in the durable mailbox until {target}'s session connects."
        warnings.append(
            f"{target} is {status} and no host is connected to resume it: the message waits for its session "
            "(or for a host to connect). It is stored; do not resend it."
        )
    elif error:
        expected = "The message stays queued; recovery admits it again, in order."
        warnings.append(
            f"Admission failed for now ({error}); the message is queued for recovery. "
            "It is stored; do not resend it."
        )
    elif status == Status.RUNNING:
        expected = f"{target} is in a turn: the message enters its history at its next step boundary."
    elif status == Status.IDLE:
        expected = f"{target} is idle: the message starts a turn."
    elif status == Status.PROVISIONING:
        expected = f"{target}'s session is being provisioned; it receives the message when the session connects."
    elif status in SESSIONLESS:
        expected = f"{target} has no session: its host is resuming it, and it receives the message when it connects."
        if status == Status.FAILED:
            warnings.append(f"{target}'s last session start failed; the host was asked again.")
    else:
        expected = "The message stays queued for recovery."
    out = {
        "target_status": str(status),
        "observed_at": iso(timezone.now()),
        "host_connected": bool(has_host),
        "expected": expected,
        "warnings": warnings,
    }
    if code:
        out["code"] = str(code)
    return out
