"""A member's end of life: revoking its tokens, retiring it (docs/operations.md, "Token lifecycle").

``member_tokens_revoke`` deletes every token of a member (issued and start);
``member_retire`` makes a teammate ``retired`` for good: its tokens are revoked,
its session (if any) is told to reconnect, which its revoked token then cannot
do, its undelivered messages stay stored but are never pushed (a retired target
takes no new messages: TEAM_TARGET_RETIRED), no host is asked to start it again,
and it may own no tasks. The Lead cannot be retired.

``team_host_token_rotate`` gives a team a new host token (shown once): the earlier
one stops working, and the hosts connected with it are told to reconnect, which
it then cannot do.

Each drops the revoked tokens from this process's lookup cache at once
(mailbox/plumbing/auth.py); other processes stop accepting them within
STEERBOARD_TOKEN_CACHE_SECONDS.
"""
from django.db import transaction

from mailbox.plumbing import events
from mailbox.engine import lead_log
from mailbox.plumbing import auth
from teams import services as team_services
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, SessionState, Task, Team, TaskStatus
from teams.tokens import member_tokens_delete

# Code with which a retired member's open websocket is closed (it reconnects; its token is gone).
SESSION_RESET = {"type": "session.reset"}


def _member(team_id: int, name: str) -> Member:
    member = Member.objects.select_for_update().filter(team_id=team_id, name=name).first()
    if member is None:
        raise TeamError(ErrorCode.TEAM_UNKNOWN_TARGET, f"No member named {name!r} on this team.")
    return member


def team_host_token_rotate(*, team: Team) -> str:
    """A new host token for the team, answered once (only its hash is kept). Hosts connected
    with the earlier one get ``host.reset`` once this commits: they reconnect, and their
    token is refused (4401)."""
    with transaction.atomic():
        token = team_services.team_host_token_replace(team=team)
        events.send_after_commit(events.host_group(team.pk), {"type": "host.reset"})
    return token


def member_tokens_revoke(*, team_id: int, name: str) -> int:
    """Revoke every token of a member (it keeps its roster place; a new token may be issued).
    Answers how many were revoked."""
    with transaction.atomic():
        member = _member(team_id, name)
        hashes = member_tokens_delete(member_id=member.pk)
    auth.forget(hashes)
    return len(hashes)


def member_retire(*, team_id: int, name: str) -> tuple[Member, int]:
    """Retire a teammate; answers (the member, how many tokens were revoked). Retiring a retired member is a no-op."""
    with transaction.atomic():
        member = _member(team_id, name)
        if member.is_lead:
            raise TeamError(ErrorCode.VALIDATION_ERROR, "The Lead cannot be retired.")
        hashes = member_tokens_delete(member_id=member.pk)
        channel = member.session_channel
        if member.phase != Phase.RETIRED:
            previous = member.status
            Member.objects.filter(pk=member.pk).update(
                phase=Phase.RETIRED, session_state=SessionState.INACTIVE, session_channel="", start_requested_at=None
            )
            # Its open tasks go back to the board: a retired member can own none.
            Task.objects.filter(owner_id=member.pk).exclude(status__in=[TaskStatus.COMPLETED, TaskStatus.DELETED]).update(
                owner=None
            )
            member.refresh_from_db()
            lead_log.member_logged(
                team_id=team_id,
                data={"member": member.name, "status": member.status, "previous": previous},
                status=member.status,
            )
            if channel:
                transaction.on_commit(lambda: events.channel_send_quietly(channel, SESSION_RESET))
    auth.forget(hashes)
    return member, len(hashes)
