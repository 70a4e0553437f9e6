"""manage.py team_export TEAM [--since ISO] [--output FILE]: the team's whole record as NDJSON
(mailbox/operations/archive.py) on standard output or into FILE, a page of rows at a time."""
from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from mailbox.operations.archive import export_lines
from teams.models import Team


class Command(BaseCommand):
    help = (
        "Write a team's roster, task board, messages with their Lead-log events, histories and human prompts "
        "as NDJSON (one JSON object a line), for an archive or for team_import."
    )

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("--since", help="only messages, records, entries and prompts from this ISO 8601 time on")
        parser.add_argument("--output", "-o", default="-", help="a file to write; '-' (the default): standard output")

    def handle(self, *args, team, since=None, output="-", **options):
        found = Team.objects.filter(name=team).first()
        if found is None:
            raise CommandError(f"NOT_FOUND: no team {team!r}")
        since_at = None
        if since:
            since_at = parse_datetime(since)
            if since_at is None:
                raise CommandError(f"VALIDATION_ERROR: --since {since!r} is not an ISO 8601 time")
            if since_at.tzinfo is None:
                raise CommandError("VALIDATION_ERROR: --since needs a time zone (e.g. 2026-12-01T00:00:00Z)")
        lines = export_lines(team=found, since=since_at)
        if output == "-":
            for line in lines:
                self.stdout.write(line, ending="")
            return
        with open(output, "w", encoding="utf-8") as out:
            out.writelines(lines)
