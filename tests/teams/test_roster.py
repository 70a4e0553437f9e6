"""teams/services.py: teams, the roster and tokens."""
import json

import pytest
from django.core.management import call_command

from teams.errors import ErrorCode, TeamError
from teams.models import Member, MemberToken, Team
from teams.selectors import member_by_token, team_by_host_token
from teams.services import member_spawn, team_create
from teams.tokens import token_hash

pytestmark = pytest.mark.django_db


def test_a_team_is_created_with_its_lead_and_hashed_tokens():
    team, lead, lead_token, host_token = team_create(name="alpha")
    assert (lead.name, lead.role, lead.status) == ("lead", "lead", "inactive")
    assert member_by_token(token=lead_token) == lead
    assert team_by_host_token(token=host_token) == team
    # Only hashes are stored.
    assert not MemberToken.objects.filter(token_hash=lead_token).exists()
    assert MemberToken.objects.filter(token_hash=token_hash(lead_token)).exists()
    assert team.host_token_hash == token_hash(host_token) != host_token


def test_team_names_are_unique_and_well_formed():
    team_create(name="alpha")
    with pytest.raises(TeamError) as exc:
        team_create(name="alpha")
    assert exc.value.code == ErrorCode.TEAM_NAME_TAKEN
    for bad in ("", "Has Spaces", "x" * 64, "../etc"):
        with pytest.raises(TeamError) as exc:
            team_create(name=bad)
        assert exc.value.code == ErrorCode.VALIDATION_ERROR


def test_member_names_are_kebab_case_unique_and_the_roster_is_bounded(settings):
    _, lead, _, _ = team_create(name="alpha")
    member = member_spawn(lead=lead, name="researcher-2", description="a teammate", prompt="")
    assert member.status == "provisioning"
    with pytest.raises(TeamError) as exc:
        member_spawn(lead=lead, name="researcher-2", description="a teammate", prompt="")
    assert exc.value.code == ErrorCode.TEAM_NAME_TAKEN
    with pytest.raises(TeamError) as exc:
        member_spawn(lead=lead, name="Researcher", description="a teammate", prompt="")
    assert exc.value.code == ErrorCode.VALIDATION_ERROR
    with pytest.raises(TeamError) as exc:
        member_spawn(lead=member, name="helper", description="a teammate", prompt="")
    assert exc.value.code == ErrorCode.LEAD_ONLY
    # The bound counts teammates (the seed's maxMembers): with 3, the Lead and 3 teammates fit.
    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_MEMBERS_PER_TEAM": 3}
    member_spawn(lead=lead, name="third", description="a teammate", prompt="")
    member_spawn(lead=lead, name="fourth", description="a teammate", prompt="")
    with pytest.raises(TeamError) as exc:
        member_spawn(lead=lead, name="fifth", description="a teammate", prompt="")
    assert exc.value.code == ErrorCode.TEAM_ROSTER_FULL
    assert exc.value.message == "The team already has 3 teammates (the Lead not counted), the most it may have."
    assert Member.objects.count() == 4


def test_retired_names_are_never_reused():
    _, lead, _, _ = team_create(name="alpha")
    member = member_spawn(lead=lead, name="old", description="a teammate", prompt="")
    Member.objects.filter(pk=member.pk).update(phase="retired")
    with pytest.raises(TeamError) as exc:
        member_spawn(lead=lead, name="old", description="a teammate", prompt="")
    assert exc.value.code == ErrorCode.TEAM_NAME_TAKEN


def test_team_create_and_member_token_commands_print_the_protocol_json(capsys):
    call_command("team_create", "demo", "--json")
    created = json.loads(capsys.readouterr().out)
    assert set(created) == {"team", "lead", "host_token"}
    assert created["team"] == "demo" and created["lead"]["name"] == "lead"
    assert member_by_token(token=created["lead"]["token"]).name == "lead"
    assert team_by_host_token(token=created["host_token"]) == Team.objects.get(name="demo")

    call_command("member_token", "demo", "lead", "--json")
    issued = json.loads(capsys.readouterr().out)
    assert list(issued) == ["token"]
    assert member_by_token(token=issued["token"]).name == "lead"
    # The first token still works: member_token adds one.
    assert member_by_token(token=created["lead"]["token"]).name == "lead"
