# An A2A task's reads find its prompt's entry and the turn boundaries after it by index,
# not by scanning the member's history (issue 26, item 2; mailbox/engine/history.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mailbox', '0009_message_cancelled'),
        ('teams', '0002_membertoken_kind'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='historyentry',
            index=models.Index(condition=models.Q(('prompt_id__isnull', False)), fields=['member', 'prompt_id'], name='history_prompt_entry'),
        ),
        migrations.AddIndex(
            model_name='historyentry',
            index=models.Index(condition=models.Q(('kind__in', ['turn_start', 'turn_end'])), fields=['member', 'id'], name='history_turn_bounds'),
        ),
    ]
