"""Operator REST tokens (issue 12, item 12): stored as a hash only, revocable, and the
plain-text tokens of DRF's authtoken table are migrated so they keep working."""
import importlib
import json
from io import StringIO
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from accounts.models import OperatorToken
from teams.tokens import token_hash

pytestmark = pytest.mark.django_db(transaction=True)


def _command(*args) -> dict:
    out = StringIO()
    call_command(*args, "--json", stdout=out)
    return json.loads(out.getvalue())


def _teams(token: str) -> int:
    return Client().get("/api/v1/teams", HTTP_AUTHORIZATION=f"Token {token}").status_code


def test_operator_tokens_are_stored_as_hashes_and_work():
    created = _command("operator_create", "op", "--password", "a long enough passphrase")
    token = created["token"]
    assert token.startswith("sbo_")
    stored = list(OperatorToken.objects.values_list("token_hash", flat=True))
    assert stored == [token_hash(token)] and token not in stored
    assert _teams(token) == 200
    assert _teams(token + "x") == 401


def test_revoked_and_reset_tokens_stop_working():
    first = _command("operator_create", "op", "--password", "a long enough passphrase")["token"]
    second = _command("operator_token", "op")["token"]
    assert _teams(first) == 200 and _teams(second) == 200
    # A reset (operator_create again) issues a new token and revokes the earlier ones.
    third = _command("operator_create", "op", "--password", "another long passphrase")["token"]
    assert _teams(first) == 401 and _teams(second) == 401 and _teams(third) == 200
    assert _command("operator_token", "op", "--revoke") == {"username": "op", "revoked": 1}
    assert _teams(third) == 401
    # An inactive user's token authenticates nobody either.
    fourth = _command("operator_token", "op")["token"]
    User.objects.filter(username="op").update(is_active=False)
    assert _teams(fourth) == 401


def test_operator_create_applies_the_password_validators():
    with pytest.raises(CommandError, match="VALIDATION_ERROR"):
        _command("operator_create", "op", "--password", "pw")
    assert not User.objects.filter(username="op").exists()
    assert _command("operator_create", "op", "--password", "pw", "--skip-password-validation")["token"]


def test_the_migration_keeps_plain_text_drf_tokens_working_as_hashes():
    user = User.objects.create_user("legacy", password="x" * 20)
    legacy = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, user_id integer NOT NULL, created timestamp NOT NULL)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, CURRENT_TIMESTAMP)", [legacy, user.pk])
    try:
        migration = importlib.import_module("accounts.migrations.0001_initial")
        migration.hash_existing_tokens(apps, SimpleNamespace(connection=connection))
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM authtoken_token")
            assert cursor.fetchone()[0] == 0  # no plain text left
        assert OperatorToken.objects.get(user=user).token_hash == token_hash(legacy)
        assert _teams(legacy) == 200
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE authtoken_token")
