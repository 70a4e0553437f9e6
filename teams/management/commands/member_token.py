import json

from django.core.management.base import BaseCommand, CommandError

from teams.models import Member
from teams.services import member_token_create


class Command(BaseCommand):
    help = "Issue a new token for an existing member (for agents run by hand)."

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("member")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, team, member, **options):
        found = Member.objects.filter(team__name=team, name=member).first()
        if found is None:
            raise CommandError(f"NOT_FOUND: no member {member!r} in team {team!r}")
        token = member_token_create(member=found)
        self.stdout.write(json.dumps({"token": token}) if options["json"] else token)
