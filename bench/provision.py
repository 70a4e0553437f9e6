"""Create a team with N teammates and print every token as JSON (one Django
start instead of one manage.py call per member). Run with the environment of
the LiveEnvironment under test:  python bench/provision.py TEAM N"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from teams.models import Phase  # noqa: E402
from teams.services import member_spawn, member_token_create, team_create  # noqa: E402


def main(team_name: str, count: int, user: str = "") -> None:
    team, lead, lead_token, host_token = team_create(name=team_name)
    members = {}
    with transaction.atomic():
        for i in range(count):
            member = member_spawn(lead=lead, name=f"m{i}", description="bench", prompt="bench")
            # Active with no session: its own session says hello (no host provisions it).
            member.phase = Phase.ACTIVE
            member.save(update_fields=["phase"])
            members[member.name] = member_token_create(member=member)
    out = {"team": team.name, "team_id": team.pk, "lead": lead_token, "host": host_token, "members": members}
    if user:
        from django.contrib.auth.models import User

        from accounts.operators import operator_role_set
        from accounts.tokens import operator_token_create

        op, _ = User.objects.get_or_create(username=user, defaults={"is_staff": True})
        op.set_password("pw-" + user)
        op.save()
        operator_role_set(user=op, operator=True)
        out["operator"] = {"username": user, "password": "pw-" + user, "token": operator_token_create(user=op)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
