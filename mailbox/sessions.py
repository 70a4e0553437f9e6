"""Agent sessions: what happens when one says hello, reports its status and leaves.

Human prompts are the Queue adapter's (mailbox/queue_adapter.py): a session's
hello and each idle status offer it the next one, and an idle status ends the
prompt turn under way. Hosts are mailbox/hosts.py's, interrupting a turn
mailbox/interrupt.py's. What one websocket of this process does with its
session's frames (ordering, quotas, in flight) is mailbox/session_socket.py's.
"""
from django.db import transaction

from mailbox import delivery, lead_log, presence, queue_adapter, usage
from teams.models import Member, SessionState
from teams.services import member_session_end, member_session_set


def session_hello(*, member_id: int, state: str, channel: str) -> list[dict]:
    """A session connected: record its state, admit what waits, and return every
    undelivered message for it in seq order (the replay)."""
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        lead_log.member_status_logged(member, previous)
    presence.session_attached(member_id=member_id, channel=channel)
    # Admitted here, steered by the replay below: each undelivered message once. Nothing while
    # the team's token budget is used up: a replay would start a turn (mailbox/usage.py).
    delivery.target_admit(target_id=member_id, redeliver=False, push=False)
    replay = [] if usage.budget_refusal(team_id=member.team_id) else [
        delivery.steer_of(m, target_name=member.name) for m in delivery.undelivered_for(member=member)
    ]
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id, fresh_session=True)
    return replay


def session_status(*, member_id: int, state: str, channel: str) -> Member:
    with transaction.atomic():
        member, previous = member_session_set(member_id=member_id, state=state, channel=channel)
        lead_log.member_status_logged(member, previous)
        if state == SessionState.IDLE:
            queue_adapter.prompt_turn_ended(member_id=member_id)
    if state == SessionState.IDLE:
        queue_adapter.prompts_dispatch(member_id=member_id)
    return member


def session_closed(*, member_id: int, channel: str) -> None:
    with transaction.atomic():
        member = Member.objects.get(pk=member_id)
        previous = member.status
        ended = member_session_end(member_id=member_id, channel=channel)
        if ended is not None:
            lead_log.member_status_logged(ended, previous)
    presence.session_detached(channel=channel)
