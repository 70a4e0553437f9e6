"""Reads of /a2a's gate (delegation/server.py): the member a path names, a team's Lead."""
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, Team


def lead_of_team(*, team_name: str) -> Member:
    """The Lead whose card is the team's; NOT_FOUND without such a team."""
    lead = Member.objects.select_related("team").filter(team__name=team_name, role="lead").first()
    if lead is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No team named {team_name!r}.")
    return lead


def member_of_path(*, team_name: str, member_name: str) -> Member:
    """The member ``/a2a/<team>/<member>/`` names; NOT_FOUND for no such team, no such
    member, or a retired one."""
    member = Member.objects.select_related("team").filter(team__name=team_name, name=member_name).first()
    if member is None and not Team.objects.filter(name=team_name).exists():
        raise TeamError(ErrorCode.NOT_FOUND, f"No team named {team_name!r}.")
    if member is None or member.phase == Phase.RETIRED:
        raise TeamError(ErrorCode.NOT_FOUND, f"No member named {member_name!r} on team {team_name!r}.")
    return member
