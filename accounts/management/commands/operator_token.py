import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.tokens import operator_token_create, operator_tokens_revoke


class Command(BaseCommand):
    help = "Issue another REST token for a dashboard user (shown once), or --revoke all of the user's tokens."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--revoke", action="store_true", help="revoke every token of the user; issue none")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, username, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"NOT_FOUND: no user {username!r}")
        if options["revoke"]:
            out = {"username": username, "revoked": operator_tokens_revoke(user=user)}
            self.stdout.write(json.dumps(out) if options["json"] else f"revoked {out['revoked']} token(s) of {username}")
            return
        token = operator_token_create(user=user)
        self.stdout.write(json.dumps({"username": username, "token": token}) if options["json"] else token)
