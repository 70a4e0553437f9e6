import json
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.operators import operator_role_set
from accounts.tokens import operator_token_create, operator_tokens_revoke


class Command(BaseCommand):
    help = (
        "Create (or reset) a dashboard user: an operator by default, a read-only viewer with --viewer. "
        "Prints a new REST token (shown once; a reset revokes the user's earlier tokens)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", help="default: a random one, printed")
        parser.add_argument(
            "--skip-password-validation",
            action="store_true",
            help="accept a --password that AUTH_PASSWORD_VALIDATORS refuse (throwaway test users only)",
        )
        parser.add_argument("--viewer", action="store_true", help="may watch, may not act")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, username, **options):
        password = options["password"] or secrets.token_urlsafe(12)
        User = get_user_model()
        if options["password"] and not options["skip_password_validation"]:
            try:
                validate_password(password, User(username=username))
            except ValidationError as exc:
                raise CommandError("VALIDATION_ERROR: " + " ".join(exc.messages))
        with transaction.atomic():
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.save()
            operator_role_set(user=user, operator=not options["viewer"])
            operator_tokens_revoke(user=user)
            token = operator_token_create(user=user)
        out = {
            "username": username,
            "password": password,
            "token": token,
            "role": "viewer" if options["viewer"] else "operator",
        }
        self.stdout.write(json.dumps(out) if options["json"] else f"{out['role']} {username} / {password}")
