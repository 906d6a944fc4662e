from django.apps import AppConfig

from portal import hooks


class DashboardsConfig(AppConfig):
    """Utilization snapshots, wait times, GPU metrics from DCGM, and the pages, REST and
    Prometheus metrics that show them."""

    name = "dashboards"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboards.dcgm import dcgm_presence
        from dashboards.estimates import (  # they read this app's models
            estimate_ranges,
            estimates_record,
        )

        hooks.estimates_refreshed.connect(estimates_record)  # the refresh task's ranges
        hooks.estimate_ranges.connect(estimate_ranges)
        hooks.dcgm_presence.connect(dcgm_presence)  # the cluster doctor's DCGM question
