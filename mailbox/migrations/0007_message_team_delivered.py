# The dashboard's charts read a team's deliveries in a time window (frontend/charts.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mailbox', '0006_operator_console'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='teammessage',
            index=models.Index(fields=['team', 'delivered_at'], name='message_team_delivered'),
        ),
    ]
