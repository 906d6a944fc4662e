from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    """GPU model catalog, quotas and fair share, and the cycle around the pure engine."""

    name = "scheduling"
    default_auto_field = "django.db.models.BigAutoField"
