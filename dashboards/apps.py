from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    """Utilization snapshots, wait times, GPU metrics from DCGM, and the pages, REST and
    Prometheus metrics that show them."""

    name = "dashboards"
    default_auto_field = "django.db.models.BigAutoField"
