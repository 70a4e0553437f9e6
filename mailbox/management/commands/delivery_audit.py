"""manage.py delivery_audit TEAM [--all-delivered] [--json]: the delivery audit
(mailbox/operations/audit.py) of one team, printed; exits 1 when a check fails."""
import json

from django.core.management.base import BaseCommand, CommandError

from mailbox.operations.audit import delivery_audit, summary, verdict
from teams.models import Team


class Command(BaseCommand):
    help = (
        "Check a team's delivery promises in the database: each delivered message once in its target's "
        "history with one delivered record, per-target seq order, no message in a foreign history. Exit 1 on a failure."
    )

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument(
            "--all-delivered",
            action="store_true",
            help="a message not yet delivered is a failure too (a quiet team, e.g. after a load run)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, team, **options):
        found = Team.objects.filter(name=team).first()
        if found is None:
            raise CommandError(f"NOT_FOUND: no team {team!r}")
        audit = delivery_audit(found)
        audit["ok"] = verdict(audit, all_delivered=options["all_delivered"])
        audit["summary"] = summary(audit)
        if options["json"]:
            self.stdout.write(json.dumps(audit))
        else:
            self.stdout.write(audit["summary"])
            for name, values in audit["examples"].items():
                self.stdout.write(f"  {name}: {values}")
        if not audit["ok"]:
            raise CommandError(f"delivery audit of {team}: {audit['summary']}", returncode=1)
