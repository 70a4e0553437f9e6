"""What Django's TransactionTestCase runs after each test on the test database (pytest-django's
``transactional_db``, ``django_db(transaction=True)``: nearly every database test here), made
cheap while the next test finds the same database.

Django's own flush empties every table (on PostgreSQL one ``TRUNCATE`` of them all, on SQLite a
``DELETE`` each), then sends ``post_migrate``, whose receivers (contenttypes', auth's) write
``django_content_type`` and ``auth_permission`` again with the rows ``migrate`` made. On the
run's PostgreSQL that cost 1.5-2.1 s for the TRUNCATE (a new file for each of the 33 tables and
their indexes, the old ones removed) and 1.0-1.3 s for ``post_migrate``, per test (5 Dec, load
average 18); a ``DELETE`` of each table's few rows costs 16-29 ms.

This one deletes every row of every table but those two in one transaction (the foreign keys are
``DEFERRABLE INITIALLY DEFERRED``, checked once every table is empty) and sends no
``post_migrate``: those two tables keep the very rows it would write again, and nothing of the
project or its tests writes them. Sequences go on counting, as they do after Django's flush
without ``reset_sequences``. Any other flush (``manage.py flush`` resets sequences; a test with
``available_apps`` cascades; serialized rollback inhibits ``post_migrate``) is Django's."""
from django.core.management.commands import flush
from django.db import connections, transaction

# Filled by post_migrate with what migrate made, and never written otherwise: kept as they are.
KEPT = {"django_content_type", "auth_permission"}


class Command(flush.Command):
    def handle(self, **options):
        if (options.get("reset_sequences", True) or options.get("allow_cascade", False)
                or options.get("inhibit_post_migrate", False) or options.get("interactive", True)):
            return super().handle(**options)
        connection = connections[options["database"]]
        tables = set(connection.introspection.django_table_names(only_existing=True, include_views=False))
        if not KEPT <= tables:
            return super().handle(**options)
        with transaction.atomic(using=options["database"]), connection.cursor() as cursor:
            for table in sorted(tables - KEPT):
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
