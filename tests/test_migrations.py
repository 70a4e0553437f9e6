"""Migrations: the models and the migrations agree, and they are applied on the
backend the test run is on (scripts/test.sh runs SQLite and PostgreSQL)."""
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_migrations_are_complete_and_applied_on_this_backend():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
    tables = connection.introspection.table_names()
    assert {"mailbox_serverprocess", "mailbox_sessionpresence", "mailbox_teammessage"} <= set(tables)
