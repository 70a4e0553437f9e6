from django.apps import AppConfig


class MailboxConfig(AppConfig):
    name = "mailbox"
    label = "mailbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the OpenAPI extension for member bearer tokens.
        from mailbox.transports.api import openapi  # noqa: F401
        from django.conf import settings

        from mailbox.plumbing import db, events
        from mailbox.engine import hot_sql, lead_log
        from mailbox.members import hosts
        from mailbox.plumbing import metrics, outage, tracing
        from mailbox.operations import recovery
        from mailbox.transports import tools
        from teams import services as team_services

        tools.registry_check()  # the Team tools are the wire contract's (steerboard_protocol.tools)

        outage.install_log_filter()  # no traceback per request while the database is away
        tracing.configure()  # off unless OTEL_* asks for traces
        # The writer's batch transaction, pipeline and end-of-batch flush are the hot path's SQL,
        # which sits above mailbox/plumbing/db.py: db is handed them, it does not import them.
        db.writer_parts_install(
            flush=hot_sql.batch_flush, pipeline=hot_sql.jobs_piped, transaction_of=hot_sql.hot_transaction,
            observe=metrics.batch_committed,
        )
        # The roster's and the board's changes are recorded by the service that makes them,
        # in the Lead log: teams does not know the mailbox, it is handed the recorder.
        team_services.records_to(lead_log)
        # When Redis comes back, events rings the sessions' missed doorbells again through
        # recovery (which sits above it: events is handed the function, it does not import it).
        events.ring_again_with(recovery.sessions_ring_again)
        # A host's arrival admits what waited for it, through recovery (above hosts: delivery
        # asks hosts for starts), handed over the same way.
        hosts.catch_up_with(recovery.host_catch_up)

        if settings.STEERBOARD.get("COUNT_SQL"):
            from mailbox.plumbing import sqlcount

            sqlcount.install()
