import json

from django.core.management.base import BaseCommand, CommandError

from teams.errors import TeamError
from teams.models import Team


class Command(BaseCommand):
    help = "Retire a teammate: its tokens are revoked, its session closed, it takes no messages and is never started again."

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("member")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, team, member, **options):
        from mailbox.members.lifecycle import member_retire

        found = Team.objects.filter(name=team).first()
        if found is None:
            raise CommandError(f"NOT_FOUND: no team {team!r}")
        try:
            retired, revoked = member_retire(team_id=found.pk, name=member)
        except TeamError as exc:
            raise CommandError(f"{exc.code}: {exc.message}")
        out = {"member": retired.name, "status": retired.status, "revoked": revoked}
        self.stdout.write(json.dumps(out) if options["json"] else f"{retired} is {retired.status}; revoked {revoked} token(s)")
