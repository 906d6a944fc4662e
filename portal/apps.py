from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_delete, post_migrate, post_save


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
        # A token or a user saved or deleted here: the tokens this process remembers go
        # (portal/tokens.py), so a revocation or a deactivation applies from the next request.
        for signal in (post_save, post_delete):
            for model in ("portal.ApiToken", settings.AUTH_USER_MODEL):
                signal.connect(_tokens_forget, sender=model, dispatch_uid=f"tokens_{model}")


def _tokens_forget(**_: Any) -> None:
    from portal.tokens import api_tokens_forget

    api_tokens_forget()
