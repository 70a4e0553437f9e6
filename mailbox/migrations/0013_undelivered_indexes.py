"""The message indexes a delivery writes to, kept small at a million stored messages.

Marking a message delivered changes its state (and delivered_at), so PostgreSQL writes a new
entry to every index of the row. The (target, state, seq) and (state, queued_at) indexes now
hold only the undelivered rows (what their queries read: models.UNDELIVERED), so they stay
the size of the pending few and a delivery adds nothing to them; (team, delivered_at) holds a
message once it is delivered. On PostgreSQL, the LIKE indexes Django adds to a text key
(``varchar_pattern_ops``) on the message's id and the Lead log's message id are dropped:
no query matches ids by pattern, and with random ids each send wrote random pages of them.
"""
from django.db import migrations, models

# The table, the column and Django's name for its LIKE index (what a reverse migration makes again).
LIKE_INDEXES = (
    ("mailbox_teammessage", "id", "mailbox_teammessage_id_039f2e2d_like"),
    ("mailbox_leadlogrecord", "message_id", "mailbox_leadlogrecord_message_id_80af8ac4_like"),
)


def like_indexes_drop(apps, schema_editor):
    """Every ``varchar_pattern_ops`` index on those columns, whatever its name."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, column, _name in LIKE_INDEXES:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s "
                "AND indexdef LIKE %s",
                [table, f"%({column} varchar_pattern_ops)"],
            )
            for (name,) in cursor.fetchall():
                schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def like_indexes_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column, name in LIKE_INDEXES:
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}" varchar_pattern_ops)')


class Migration(migrations.Migration):

    dependencies = [
        ('mailbox', '0012_message_trace_context'),
        ('teams', '0004_team_token_budget'),
    ]

    operations = [
        migrations.RunPython(like_indexes_drop, like_indexes_create, elidable=False),
        migrations.RemoveIndex(
            model_name='teammessage',
            name='message_target_state_seq',
        ),
        migrations.RemoveIndex(
            model_name='teammessage',
            name='message_state_age',
        ),
        migrations.RemoveIndex(
            model_name='teammessage',
            name='message_team_delivered',
        ),
        migrations.AddIndex(
            model_name='teammessage',
            index=models.Index(condition=models.Q(('state', 'delivered'), _negated=True), fields=['target', 'state', 'seq'], name='message_undelivered_target'),
        ),
        migrations.AddIndex(
            model_name='teammessage',
            index=models.Index(condition=models.Q(('state', 'delivered'), _negated=True), fields=['state', 'queued_at'], name='message_undelivered_age'),
        ),
        migrations.AddIndex(
            model_name='teammessage',
            index=models.Index(condition=models.Q(('delivered_at__isnull', False)), fields=['team', 'delivered_at'], name='message_team_delivered'),
        ),
    ]
