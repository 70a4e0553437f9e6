import json
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from mailbox.operations.recovery import recovery_pass


class Command(BaseCommand):
    help = "Run the recovery sweeper (reap dead processes' sessions, then admit and re-push) once, or forever with --loop."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true")
        parser.add_argument("--interval", type=float, default=None)

    def handle(self, *args, **options):
        interval = options["interval"] or settings.STEERBOARD["SWEEP_INTERVAL"] or 5.0
        while True:
            self.stdout.write(json.dumps(recovery_pass()))
            if not options["loop"]:
                return
            time.sleep(interval)
