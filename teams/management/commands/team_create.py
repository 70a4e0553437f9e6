import json

from django.core.management.base import BaseCommand, CommandError

from teams.errors import TeamError
from teams.services import team_create


class Command(BaseCommand):
    help = "Create a team with its Lead; print the Lead's token and the host token (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, name, **options):
        try:
            team, lead, lead_token, host_token = team_create(name=name)
        except TeamError as exc:
            raise CommandError(f"{exc.code}: {exc.message}")
        out = {"team": team.name, "lead": {"name": lead.name, "token": lead_token}, "host_token": host_token}
        if options["json"]:
            self.stdout.write(json.dumps(out))
        else:
            self.stdout.write(f"team {team.name}\nlead token {lead_token}\nhost token {host_token}")
