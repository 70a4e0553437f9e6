"""The hosts: the processes that start agent sessions for a team (sdk/steerboard_agents/host.py).

A host arrives (``host_arrived``: its websocket is recorded, mailbox/members/presence.py,
and what waited for a host is started and admitted), leaves
(``host_disconnected``), and reports a start it could not make
(``host_start_failed``: a member that never ran fails, one that did stays
inactive).

Asking a host to start a member is the engine's (mailbox/engine/starts.py): delivery,
the Queue adapter and recovery ask it.
"""
import logging

from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from mailbox.engine import lead_log, starts
from mailbox.members import presence
from teams.models import Member
from teams.services import member_fail

log = logging.getLogger(__name__)

# What a host's arrival admits for its team: recovery's (mailbox/operations/recovery.py), which sits above
# this module (operations above members, docs/code.md "Imports"); handed over by mailbox/apps.py.
_catch_up: Callable[..., None] | None = None


def catch_up_with(catch_up: Callable[..., None]) -> None:
    """Register what ``host_arrived`` runs for the team once its starts are asked for:
    ``catch_up(team_id=...)``."""
    global _catch_up
    _catch_up = catch_up


# --- a host's websocket ---------------------------------------------------------------------
def host_arrived(*, team_id: int, channel: str, joined_at: datetime) -> None:
    """A host connected to the team (its websocket ``channel``): record it, then let it
    provision and resume what was waiting for one. Starts asked before it joined the team's
    hosts (``joined_at``: it gets every start asked since) may have gone to a host that is
    gone: they are asked of this one. One asked since reached it: asked again, its new token
    would revoke the one this host was just given."""
    presence.host_attached(team_id=team_id, channel=channel)
    Member.objects.filter(team_id=team_id, start_requested_at__lt=joined_at).update(start_requested_at=None)
    starts.members_start_pending(team_id=team_id, wait=True)
    if _catch_up is not None:
        _catch_up(team_id=team_id)


def host_disconnected(*, channel: str) -> None:
    presence.host_detached(channel=channel)


def host_start_failed(*, team_id: int, member_name: str, error: str) -> None:
    """The host could not start ``member_name``: one that never ran fails (an operator
    retries it), one that ran stays inactive; the error goes to the Lead log."""
    member = Member.objects.filter(team_id=team_id, name=member_name).first()
    if member is None:
        return
    previous = member.status
    with transaction.atomic():
        failed = member_fail(member_id=member.pk)
        Member.objects.filter(pk=member.pk).update(start_requested_at=None)
        lead_log.member_logged(team_id=team_id, data={"member": member_name, "start_failed": error[:2000]})
        lead_log.member_status_logged(failed, previous)
