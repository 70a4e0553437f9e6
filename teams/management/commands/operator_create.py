import json
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

OPERATORS_GROUP = "operators"


class Command(BaseCommand):
    help = "Create (or reset) a dashboard user: an operator by default, a read-only viewer with --viewer."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", help="default: a random one, printed")
        parser.add_argument("--viewer", action="store_true", help="may watch, may not act")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, username, **options):
        password = options["password"] or secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
        group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
        if options["viewer"]:
            user.groups.remove(group)
        else:
            user.groups.add(group)
        token, _ = Token.objects.get_or_create(user=user)
        out = {
            "username": username,
            "password": password,
            "token": token.key,
            "role": "viewer" if options["viewer"] else "operator",
        }
        self.stdout.write(json.dumps(out) if options["json"] else f"{out['role']} {username} / {password}")
