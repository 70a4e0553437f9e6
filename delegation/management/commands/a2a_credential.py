import json

from django.core.management.base import BaseCommand, CommandError

from delegation.credentials import credential_create, credential_revoke
from delegation.models import A2ACredential
from teams.errors import TeamError


class Command(BaseCommand):
    help = (
        "Create a named A2A client credential good for the given teams (prints its token once), "
        "revoke one (--revoke), or list them (--list). docs/a2a.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?")
        parser.add_argument("--team", action="append", default=[], help="a team it may delegate to (repeat)")
        parser.add_argument("--revoke", action="store_true")
        parser.add_argument("--list", action="store_true")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, name, **options):
        if options["list"]:
            rows = [
                {"name": c.name, "author": c.user.get_username(), "teams": sorted(t.name for t in c.teams.all()),
                 "revoked": c.revoked_at is not None}
                for c in A2ACredential.objects.select_related("user").prefetch_related("teams").order_by("name")
            ]
            self._out(options, {"credentials": rows}, "\n".join(f"{r['name']} {r['teams']}" for r in rows))
            return
        if not name:
            raise CommandError("VALIDATION_ERROR: name the credential")
        try:
            if options["revoke"]:
                credential = credential_revoke(name=name)
                self._out(options, {"name": credential.name, "revoked": True}, f"revoked {credential.name}")
                return
            credential, token = credential_create(name=name, teams=options["team"])
        except TeamError as exc:
            raise CommandError(f"{exc.code}: {exc.message}")
        self._out(
            options,
            {"name": credential.name, "author": credential.user.get_username(), "teams": sorted(options["team"]),
             "token": token},
            token,
        )

    def _out(self, options, body: dict, text: str) -> None:
        self.stdout.write(json.dumps(body) if options["json"] else text)
