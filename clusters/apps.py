from django.apps import AppConfig
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from portal import hooks

# The scheduling models whose edits change the Volcano Queues (lazy "app.Model" senders).
QUEUE_POLICY_MODELS = ("scheduling.Quota", "scheduling.TeamPolicy", "scheduling.CohortQuota")


class ClustersConfig(AppConfig):
    """Registered Kubernetes clusters, their GPU inventory, and the Volcano dispatch."""

    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters import tasks  # this app's tasks import its models: only once they load

        # The portal's cancel (CANCELLING) and the scheduler's admissions, preemptions and
        # over-counted books hand over to the cluster side here, on commit (portal.hooks).
        hooks.job_cancelling.connect(tasks.cancel_job_enqueue)
        hooks.admitted.connect(tasks.dispatch_job_enqueue)
        hooks.preempted.connect(tasks.evict_job_enqueue_many)
        hooks.over_counted.connect(tasks.bindings_refresh_request)

        # A quota, cohort quota, weight or cohort edit reaches the Volcano Queues within
        # seconds, not at the next periodic sync. (A new team's queue comes with the periodic
        # sync, or with the repair its first dispatch makes if the queue is not there yet.)
        def on_policy_change(**_: object) -> None:
            transaction.on_commit(tasks.queue_sync_request)

        for model in QUEUE_POLICY_MODELS:
            post_save.connect(on_policy_change, sender=model, dispatch_uid=f"queues-{model}")
            post_delete.connect(on_policy_change, sender=model, dispatch_uid=f"queues-d-{model}")
