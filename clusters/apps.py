from django.apps import AppConfig


class ClustersConfig(AppConfig):
    """Registered Kubernetes clusters, their GPU inventory, and the Volcano dispatch."""

    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"
