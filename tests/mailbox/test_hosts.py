"""mailbox/members/hosts.py: asking a team's hosts to start members, on the real database.

The interleaving test injects a session's hello between the sweeper's query and
its locked re-read, through Django's public ``execute_wrapper`` hook.
"""
import pytest
from django.db import connection

from mailbox.engine import starts
from mailbox.models import HostPresence
from teams.models import Member, MemberToken, Phase, TokenKind
from teams.services import member_session_set, member_spawn, team_create

pytestmark = pytest.mark.django_db(transaction=True)


def _provisioning_member_with_a_host():
    team, lead, _, _ = team_create(name="hosts")
    member = member_spawn(lead=lead, name="worker", description="d", prompt="")
    HostPresence.objects.create(team=team, channel="host-1")
    return team, member


def _start_tokens(member: Member) -> list[str]:
    return list(MemberToken.objects.filter(member_id=member.pk, kind=TokenKind.START).values_list("token_hash", flat=True))


def test_a_member_still_provisioning_with_no_start_on_record_is_asked_for_once():
    team, member = _provisioning_member_with_a_host()

    assert starts.members_start_pending(team_id=team.pk) == 1
    assert len(_start_tokens(member)) == 1
    # The start is fresh now: asking again within REDELIVER_AFTER sends nothing.
    assert starts.members_start_pending(team_id=team.pk) == 0


def test_a_session_that_says_hello_while_the_sweeper_looks_is_not_asked_for_again():
    team, member = _provisioning_member_with_a_host()
    assert starts.members_start_pending(team_id=team.pk) == 1
    live_token = _start_tokens(member)
    Member.objects.filter(pk=member.pk).update(start_requested_at=None)  # as if the start went stale

    hello_done = False

    def hello_after_the_query(execute, sql, params, many, context):
        nonlocal hello_done
        result = execute(sql, params, many, context)
        if not hello_done and "teams_member" in sql and sql.lstrip().upper().startswith("SELECT"):
            hello_done = True
            member_session_set(member_id=member.pk, state="idle", channel="session-1")
        return result

    with connection.execute_wrapper(hello_after_the_query):
        asked = starts.members_start_pending(team_id=team.pk)

    assert hello_done
    assert asked == 0
    # The connected session's start token is still the live one: a reconnect with it is let in.
    assert _start_tokens(member) == live_token
    assert Member.objects.get(pk=member.pk).phase == Phase.ACTIVE
