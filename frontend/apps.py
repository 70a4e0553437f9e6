from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"

    def ready(self):
        from frontend import signals  # noqa: F401  (registers the sign-out receiver)
