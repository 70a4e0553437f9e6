import json

from django.core.management.base import BaseCommand

from mailbox.engine.idempotency import keys_prune


class Command(BaseCommand):
    help = "Delete idempotency keys older than STEERBOARD['IDEMPOTENCY_WINDOW'] (servers also do it hourly)."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps({"pruned": keys_prune()}))
