import datetime
import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def hash_existing_tokens(apps, schema_editor):
    """DRF's authtoken table held operator tokens in plain text: keep each one working
    as a hashed OperatorToken, then delete the plain-text rows."""
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    OperatorToken = apps.get_model("accounts", "OperatorToken")
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id, created FROM authtoken_token")
        rows = cursor.fetchall()
    for key, user_id, created in rows:
        if isinstance(created, datetime.datetime) and created.tzinfo is None:
            created = created.replace(tzinfo=datetime.timezone.utc)  # a naive column holds UTC (USE_TZ=False)
        token = OperatorToken.objects.create(user_id=user_id, token_hash=hashlib.sha256(key.encode()).hexdigest())
        OperatorToken.objects.filter(pk=token.pk).update(created_at=created)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM authtoken_token")


class Migration(migrations.Migration):
    initial = True

    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL)]

    operations = [
        migrations.CreateModel(
            name="OperatorToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token_hash", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operator_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.RunPython(hash_existing_tokens, migrations.RunPython.noop),
    ]
