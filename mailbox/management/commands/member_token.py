import json

from django.core.management.base import BaseCommand, CommandError

from teams.errors import TeamError
from teams.models import Member, Phase
from teams.services import member_token_create


class Command(BaseCommand):
    help = (
        "Issue a new token for an existing member (for agents run by hand; earlier tokens stay valid), "
        "or --revoke every token of the member."
    )

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("member")
        parser.add_argument("--revoke", action="store_true", help="revoke all of the member's tokens; issue none")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, team, member, **options):
        found = Member.objects.filter(team__name=team, name=member).first()
        if found is None:
            raise CommandError(f"NOT_FOUND: no member {member!r} in team {team!r}")
        if options["revoke"]:
            from mailbox.members.lifecycle import member_tokens_revoke

            try:
                revoked = member_tokens_revoke(team_id=found.team_id, name=found.name)
            except TeamError as exc:
                raise CommandError(f"{exc.code}: {exc.message}")
            out = {"member": found.name, "revoked": revoked}
            self.stdout.write(json.dumps(out) if options["json"] else f"revoked {revoked} token(s) of {found}")
            return
        if found.phase == Phase.RETIRED:
            raise CommandError(f"TEAM_TARGET_RETIRED: {member} is retired; it gets no new token")
        token = member_token_create(member=found)
        self.stdout.write(json.dumps({"token": token}) if options["json"] else token)
