from django.apps import AppConfig
from django.db import transaction
from django.db.models.signals import post_delete, post_save


class ClustersConfig(AppConfig):
    """Registered Kubernetes clusters, their GPU inventory, and the Volcano dispatch."""

    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters import tasks
        from portal.jobs import services
        from scheduling import cycle
        from scheduling.models import CohortQuota, Quota, TeamPolicy

        # The portal's cancel (CANCELLING, on commit) and the scheduler's admissions and
        # preemptions (on commit) hand over to the cluster side here. Guarded against a
        # second ready() (tests, autoreload) registering twice.
        if tasks.cancel_job_enqueue not in services.on_job_cancelling:
            services.on_job_cancelling.append(tasks.cancel_job_enqueue)
        if tasks.dispatch_job_enqueue not in cycle.on_admitted:
            cycle.on_admitted.append(tasks.dispatch_job_enqueue)
        if tasks.evict_job_enqueue_many not in cycle.on_preempted:
            cycle.on_preempted.append(tasks.evict_job_enqueue_many)
        if tasks.bindings_refresh_request not in cycle.on_over_count:
            cycle.on_over_count.append(tasks.bindings_refresh_request)

        # A quota, cohort quota, weight or cohort edit reaches the Volcano Queues within
        # seconds, not at the next periodic sync. (A new team's queue comes with the periodic
        # sync, or with the repair its first dispatch makes if the queue is not there yet.)
        def on_policy_change(**_: object) -> None:
            transaction.on_commit(tasks.queue_sync_request)

        for model in (Quota, TeamPolicy, CohortQuota):
            post_save.connect(on_policy_change, sender=model, dispatch_uid=f"queues-{model}")
            post_delete.connect(on_policy_change, sender=model, dispatch_uid=f"queues-d-{model}")
