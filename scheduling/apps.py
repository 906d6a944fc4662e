from django.apps import AppConfig

from portal import hooks


class SchedulingConfig(AppConfig):
    """GPU model catalog, quotas and fair share, and the cycle around the pure engine."""

    name = "scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduling.estimates import start_now  # it reads this app's models
        from scheduling.quota_check import quota_refusals
        from scheduling.tasks import cycle_request  # this app's tasks import its models

        # Submits, cancels, finishes and requeues all ask for a (coalesced) cycle on commit.
        hooks.jobs_changed.connect(cycle_request)
        hooks.released.connect(cycle_request)
        # Submit refuses a job its team's quota can never admit.
        hooks.quota_refusals.connect(quota_refusals)
        # A queued job's page before the refresh after the cycle has stored its estimate.
        hooks.start_estimate.connect(start_now)
