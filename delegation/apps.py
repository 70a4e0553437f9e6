from django.apps import AppConfig


class DelegationConfig(AppConfig):
    name = "delegation"
    verbose_name = "A2A delegation"
    default_auto_field = "django.db.models.BigAutoField"
