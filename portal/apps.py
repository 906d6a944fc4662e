from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PortalConfig(AppConfig):
    """Teams, jobs and their state machine, web pages and the REST API."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal.jobs.job_templates import builtin_templates_on_migrate

        # After every migrate (and test-database flush): the built-in templates match the data.
        post_migrate.connect(
            builtin_templates_on_migrate, sender=self, dispatch_uid="portal_builtin_templates"
        )
