from django.apps import AppConfig


class MailboxConfig(AppConfig):
    name = "mailbox"
    label = "mailbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the OpenAPI extension for member bearer tokens.
        from mailbox.api import openapi  # noqa: F401
        from django.conf import settings

        from mailbox import events, outage, recovery

        outage.install_log_filter()  # no traceback per request while the database is away
        # When Redis comes back, events rings the sessions' missed doorbells again through
        # recovery (which sits above it: events is handed the function, it does not import it).
        events.ring_again_with(recovery.sessions_ring_again)

        if settings.STEERBOARD.get("COUNT_SQL"):
            from mailbox import sqlcount

            sqlcount.install()
