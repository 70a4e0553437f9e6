"""Cold starts: asking the team's hosts (mailbox/members/hosts.py) to start a member's session.

A member with no session is started by asking the team's connected hosts
(``host.start`` on the team's host group) with a fresh start token, to
``provision`` a member that never ran or to ``resume`` one that did. One request
per ``REDELIVER_AFTER``: a start still fresh is not asked again. Delivery asks
when an inactive target has messages (mailbox/engine/delivery.py), the Queue adapter
when one has a prompt, recovery when a host arrives or a start went stale. Nothing
starts while the team's budget is used up (mailbox/engine/budget.py).
"""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mailbox.engine import budget
from mailbox.models import HostPresence
from mailbox.plumbing import auth, events, faults
from teams.models import Member, Phase, SessionState, Status
from teams.tokens import start_token_create

log = logging.getLogger(__name__)


def team_has_host(team_id: int) -> bool:
    return HostPresence.objects.filter(team_id=team_id).exists()


def start_request(*, member: Member, reason: str) -> None:
    """Ask the team's hosts to start this member's session (with a fresh token; it
    revokes the member's earlier start token, teams/tokens.py)."""
    token, revoked = start_token_create(member=member)
    if revoked:
        transaction.on_commit(lambda: auth.forget(revoked))
    faults.inject("resume")
    events.send_now(
        events.host_group(member.team_id),
        {"type": "host.start", "member": member.name, "token": token, "reason": reason},
    )
    Member.objects.filter(pk=member.pk).update(start_requested_at=timezone.now())


def start_reason(status: str) -> str:
    """A member that never ran (provisioning, or failed to provision) is provisioned; others resumed."""
    return "provision" if status in (Status.PROVISIONING, Status.FAILED) else "resume"


def start_is_fresh(member: Member) -> bool:
    return member.start_requested_at is not None and timezone.now() - member.start_requested_at < timedelta(
        seconds=settings.STEERBOARD["REDELIVER_AFTER"]
    )


def member_start(*, member_id: int) -> bool:
    """Ask a host to start a member that has no session, for work that waits for one
    (a human prompt). Answers whether a start was sent."""
    with transaction.atomic():
        member = Member.objects.select_for_update(no_key=True).filter(pk=member_id).first()
        if member is None:
            return False
        status = member.status
        if status not in (Status.INACTIVE, Status.FAILED, Status.PROVISIONING) or start_is_fresh(member):
            return False
        if not team_has_host(member.team_id) or budget.budget_refusal(team_id=member.team_id):
            return False  # no host; or the team's budget is used up, and a start would begin a turn
        try:
            start_request(member=member, reason=start_reason(status))
        except Exception:
            log.warning("could not ask a host to start %s", member, exc_info=True)
            return False
    return True


def members_start_pending(*, team_id: int | None = None, wait: bool = False) -> int:
    """Ask connected hosts to start members still provisioning whose start went stale.
    A member another transaction holds (recovery admitting its messages, another host's
    arrival) is passed over, for the next sweep; ``wait``: waited for instead, as a host that
    has just arrived must get its starts now (passed over, it waited for the sweep)."""
    started = 0
    with_host = HostPresence.objects.values_list("team_id", flat=True)
    qs = Member.objects.filter(phase=Phase.PROVISIONING, session_state=SessionState.INACTIVE, team_id__in=with_host)
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    for member_id in list(qs.values_list("pk", flat=True)[:100]):
        with transaction.atomic():
            # Read again under the lock: a session may have said hello since the query above.
            locked = qs.select_for_update(skip_locked=not wait, no_key=True).filter(pk=member_id).first()
            if locked is None or start_is_fresh(locked):
                continue
            try:
                start_request(member=locked, reason="provision")
                started += 1
            except Exception:
                log.warning("could not ask a host to provision %s", locked, exc_info=True)
    return started
