"""Interrupting a member's turn, for the Lead's ``interrupt`` tool and an A2A
CancelTask (delegation/tasks.py) alike: a ``session.interrupt`` to the member's
current session (mailbox/plumbing/events.py), which its websocket sends as an
``interrupt`` frame (docs/protocol.md). A session outside a turn ignores it.
"""
from mailbox.plumbing import events
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Status


def turn_interrupt(*, channel: str) -> None:
    """Ask the session on ``channel`` (a member's ``session_channel``; none: nothing) to end
    its turn. Raises when the channel layer is out of reach."""
    if channel:
        events.send_now(channel, {"type": "session.interrupt"}, to_channel=True)


def member_interrupt(*, lead: Member, target_name: str) -> str:
    """The Lead's ``interrupt``: a running teammate's turn ends; answers the status it had."""
    if not lead.is_lead:
        raise TeamError(ErrorCode.LEAD_ONLY, "Only the Lead can interrupt a teammate.")
    target = Member.objects.filter(team_id=lead.team_id, name=target_name).first()
    if target is None:
        raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {target_name!r} on this team.")
    if target.pk == lead.pk:
        raise TeamError(ErrorCode.TEAM_SELF_MESSAGE, "The Lead cannot interrupt itself.")
    previous = target.status
    if previous == Status.RUNNING:
        turn_interrupt(channel=target.session_channel)
    return previous
