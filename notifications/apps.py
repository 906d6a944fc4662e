from django.apps import AppConfig
from django.db.models.signals import post_save, pre_save

from portal import hooks


class NotificationsConfig(AppConfig):
    """Email and webhook delivery of the portal's notifications, preferences, team webhooks,
    and the notices the core does not make itself (docs/notifications.md)."""

    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notifications import events, tasks  # noqa: F401  (tasks register with Celery)

        # New notification rows become outbox rows and Celery sends them, on commit.
        hooks.notifications_created.connect(events.fan_out_and_enqueue)
        hooks.quota_changed.connect(events.quota_changed)
        hooks.cluster_unreachable.connect(events.cluster_unreachable)
        hooks.cluster_findings.connect(events.cluster_findings)
        pre_save.connect(
            events.cluster_state_remember, sender="clusters.Cluster", dispatch_uid="notify-pre"
        )
        post_save.connect(
            events.cluster_state_saved, sender="clusters.Cluster", dispatch_uid="notify-post"
        )
