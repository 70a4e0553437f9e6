# A final task keeps its turn's tool results, so reading it never touches the history again.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('delegation', '0002_task_with_tool_results'),
    ]

    operations = [
        migrations.AddField(
            model_name='delegatedtask',
            name='tool_results',
            field=models.JSONField(blank=True, default=None, null=True),
        ),
    ]
