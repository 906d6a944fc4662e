from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    """GPU model catalog, quotas and fair share, and the cycle around the pure engine."""

    name = "scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Submits, cancels, finishes and requeues all ask for a (coalesced) cycle on commit.
        from portal.jobs import services, state
        from scheduling.tasks import cycle_request

        if cycle_request not in services.on_jobs_changed:
            services.on_jobs_changed.append(cycle_request)
        if cycle_request not in state.on_released:
            state.on_released.append(cycle_request)
