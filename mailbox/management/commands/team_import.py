"""manage.py team_import FILE --team NEW [--json]: load a team_export stream (FILE, or '-' for
standard input) into a new team (mailbox/operations/archive.py); prints the new Lead's and host's tokens."""
import json
import sys

from django.core.management.base import BaseCommand, CommandError

from mailbox.operations.archive import team_import
from teams.errors import TeamError


class Command(BaseCommand):
    help = (
        "Load a team_export NDJSON stream into a new team, here or on another server: message and prompt ids are "
        "new, names and times are kept. Prints the new team's Lead token and host token (shown once)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export; '-': standard input")
        parser.add_argument("--team", required=True, help="the new team's name (not in use)")
        parser.add_argument("--json", action="store_true", help="print JSON only")

    def handle(self, *args, file, team, **options):
        try:
            if file == "-":
                result = team_import(lines=sys.stdin, name=team)
            else:
                try:
                    stream = open(file, encoding="utf-8")
                except OSError as exc:
                    raise CommandError(f"NOT_FOUND: {exc}")
                with stream:
                    result = team_import(lines=stream, name=team)
        except TeamError as exc:
            raise CommandError(f"{exc.code}: {exc.message}")
        except UnicodeDecodeError as exc:
            raise CommandError(f"VALIDATION_ERROR: the export is not UTF-8 ({exc})")
        if options["json"]:
            self.stdout.write(json.dumps(result))
        else:
            counts = ", ".join(f"{n} {kind}" for kind, n in result["counts"].items())
            self.stdout.write(f"team {result['team']}: {counts}\nlead token {result['lead']['token']}\n"
                              f"host token {result['host_token']}")
