from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Teams, jobs and their state machine, web pages and the REST API."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"
