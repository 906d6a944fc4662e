"""Celery tasks of the clusters app: thin, idempotent, IDs only in their arguments.

Each task loads rows by id and calls a service; the row's state decides whether there is
anything to do, so a redelivered or duplicated message is harmless (``acks_late``: a worker
that dies mid-task leaves the message for another). Transient failures come back from the
services as an :class:`~clusters.outcome.Outcome` with ``retry_in``, and the task re-queues
itself with that countdown; the attempt count of a dispatch lives on the job row.

The ``*_enqueue`` helpers are what hooks call (on commit): best effort, because the job table
is the outbox and the periodic reconcile re-enqueues work whose message was lost.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Iterable

from celery import Task, shared_task
from django.core.cache import cache
from django.utils import timezone

from clusters import (
    bindings,
    deadlines,
    dispatch,
    inventory,
    node_failure,
    queues,
    reconcile,
    redrive,
    serving,
    teardown,
)
from clusters.models import Cluster, ClusterState
from clusters.ratelimit import cluster_task_slot
from portal.jobs.rowlock import jobs_update
from portal.models import Job, JobState
from scheduling.tasks import cycle_request

log = logging.getLogger(__name__)

MAX_CLEANUP_TRIES = 30
QUEUE_SYNC_PENDING_KEY = "clusters:queue-sync-requested"


def _cluster(cluster_id: int) -> Cluster | None:
    return Cluster.objects.filter(pk=cluster_id).first()


# A task for a cluster whose places on this worker are all taken (it hangs, or is just busy)
# is sent again this much later instead of waiting in a worker slot.
BUSY_DEFER_SECONDS = (0.5, 1.5)


def _busy_defer() -> float:
    return random.uniform(*BUSY_DEFER_SECONDS)  # noqa: S311 - jitter, not a secret


def _cluster_of(job_id: int) -> int | None:
    return Job.objects.filter(pk=job_id).values_list("cluster_id", flat=True).first()


def _dispatch_later(job_ids: list[int], countdown: float) -> None:
    """Stamped, so the re-drive does not take the deferral for a lost message. A job whose
    attempt is in flight keeps its lease: shortening it would let this very message send a
    second create."""
    now = timezone.now()
    jobs_update(
        Job.objects.filter(pk__in=job_ids, state=JobState.ADMITTED).filter(dispatch.unclaimed(now)),
        dispatch_next_at=now + dt.timedelta(seconds=countdown),
    )
    if len(job_ids) == 1:
        dispatch_job.apply_async((job_ids[0],), countdown=countdown)
    else:
        dispatch_jobs.apply_async((job_ids,), countdown=countdown)


@shared_task(
    name="clusters.dispatch_job", bind=True, acks_late=True, ignore_result=True, max_retries=None
)
def dispatch_job(self, job_id: int) -> str:  # type: ignore[no-untyped-def]
    with cluster_task_slot(_cluster_of(job_id) or 0) as free:
        if not free:
            _dispatch_later([job_id], _busy_defer())
            return "cluster busy: deferred"
        outcome = dispatch.job_dispatch(job_id=job_id)
    if outcome.woken:
        dispatch_job_enqueue(outcome.woken)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.message


@shared_task(name="clusters.dispatch_jobs", acks_late=True, ignore_result=True)
def dispatch_jobs(job_ids: list[int]) -> int:
    """Many admissions at once: the bulk path, then the one-job task for what needs care
    (after the backoff the cluster asked for, if it did).

    Admissions for several clusters are split, one task per cluster (this one keeps the
    first), so that a cluster that hangs delays only its own jobs.
    """
    by_cluster: dict[int, list[int]] = {}
    for pk, cluster_id in Job.objects.filter(pk__in=list(job_ids)).values_list("pk", "cluster_id"):
        by_cluster.setdefault(cluster_id or 0, []).append(pk)
    if not by_cluster:
        return 0
    (cluster_id, mine), *others = sorted(by_cluster.items())
    for _, ids in others:
        dispatch_jobs.delay(ids)
    with cluster_task_slot(cluster_id) as free:
        if not free:
            _dispatch_later(mine, _busy_defer())
            return 0
        batch = dispatch.job_dispatch_batch(job_ids=mine)
    if batch.woken:
        dispatch_job_enqueue(batch.woken)
    for job_id, countdown in batch.later.items():
        dispatch_job.apply_async((job_id,), countdown=countdown or None)
    return len(mine) - len(batch.later)


@shared_task(
    name="clusters.evict_job", bind=True, acks_late=True, ignore_result=True, max_retries=None
)
def evict_job(self, job_id: int) -> str:  # type: ignore[no-untyped-def]
    with cluster_task_slot(_cluster_of(job_id) or 0) as free:
        if not free:
            evict_job.apply_async((job_id,), countdown=_busy_defer())
            return "cluster busy: deferred"
        outcome = teardown.job_evict(job_id=job_id, attempt=self.request.retries + 1)
    if outcome.retry_in is not None and self.request.retries < MAX_CLEANUP_TRIES:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.message


@shared_task(
    name="clusters.cancel_job", bind=True, acks_late=True, ignore_result=True, max_retries=None
)
def cancel_job(self, job_id: int) -> str:  # type: ignore[no-untyped-def]
    with cluster_task_slot(_cluster_of(job_id) or 0) as free:
        if not free:
            cancel_job.apply_async((job_id,), countdown=_busy_defer())
            return "cluster busy: deferred"
        outcome = teardown.job_cancel_on_cluster(job_id=job_id, attempt=self.request.retries + 1)
    if outcome.retry_in is not None and self.request.retries < MAX_CLEANUP_TRIES:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.message


@shared_task(name="clusters.sync_inventory", acks_late=True, ignore_result=True)
def sync_inventory(cluster_id: int) -> str:
    cluster = _cluster(cluster_id)
    if cluster is None:
        return "no such cluster"
    with cluster_task_slot(cluster_id) as free:
        if not free:
            return "cluster busy: the next sync reads it"
        result = inventory.inventory_sync(cluster=cluster)
    if result.ok:
        # The backstop of the nodes watch: jobs on nodes in trouble move now, not after the
        # unschedulable bound (``clusters.node_failure``).
        evict_job_enqueue_many(
            node_failure.node_failure_requeue(cluster=cluster, troubled=result.troubled)
        )
        _request_cycle()
    return result.message


@shared_task(name="clusters.sync_all_inventories", ignore_result=True)
def sync_all_inventories() -> int:
    ids = list(Cluster.objects.exclude(state=ClusterState.DISABLED).values_list("pk", flat=True))
    for pk in ids:
        sync_inventory.delay(pk)
    return len(ids)


@shared_task(name="clusters.sync_queues", acks_late=True, ignore_result=True)
def sync_queues(cluster_id: int) -> str:
    cluster = _cluster(cluster_id)
    if cluster is None:
        return "no such cluster"
    with cluster_task_slot(cluster_id) as free:
        if not free:
            sync_queues.apply_async((cluster_id,), countdown=_busy_defer())
            return "cluster busy: deferred"
        return queues.queues_sync(cluster=cluster).message


@shared_task(name="clusters.sync_all_queues", ignore_result=True)
def sync_all_queues() -> int:
    cache.delete(QUEUE_SYNC_PENDING_KEY)
    ids = list(Cluster.objects.exclude(state=ClusterState.DISABLED).values_list("pk", flat=True))
    for pk in ids:
        sync_queues.delay(pk)
    return len(ids)


def cluster_reconcile_and_enqueue(
    *, cluster: Cluster, now: dt.datetime | None = None
) -> reconcile.ReconcileResult:
    """Reconcile ``cluster`` (``clusters.reconcile``), then enqueue what it found lost: the
    dispatch of each job presumed lost (one message each), the cancels and evictions whose
    message never arrived."""
    result = reconcile.cluster_reconcile(cluster=cluster, now=now)
    if result.ok:
        try:
            serving.serving_reconcile(cluster=cluster)
        except Exception:  # an endpoint is never worth the reconcile's other findings
            log.warning("serving reconcile of %s failed", cluster.name, exc_info=True)
    for job_id in result.redispatched:
        dispatch_job_enqueue([job_id])
    for job_id in result.to_cancel:
        cancel_job_enqueue(job_id)
    for job_id in result.to_evict:
        evict_job_enqueue(job_id)
    return result


@shared_task(name="clusters.reconcile_cluster", acks_late=True, ignore_result=True)
def reconcile_cluster(cluster_id: int) -> str:
    cluster = _cluster(cluster_id)
    if cluster is None:
        return "no such cluster"
    # Single-flight per cluster: a reconcile that overlaps another only doubles the load.
    key = f"clusters:reconciling:{cluster_id}"
    if not cache.add(key, 1, timeout=120):
        return "already running"
    try:
        with cluster_task_slot(cluster_id) as free:
            if not free:
                return "cluster busy: the next reconcile reads it"
            return cluster_reconcile_and_enqueue(cluster=cluster).message
    finally:
        cache.delete(key)


@shared_task(name="clusters.refresh_bindings", acks_late=True, ignore_result=True)
def refresh_bindings(cluster_id: int) -> int:
    cluster = _cluster(cluster_id)
    return bindings.cluster_bindings_refresh(cluster=cluster) if cluster is not None else 0


@shared_task(name="clusters.reconcile_all_clusters", ignore_result=True)
def reconcile_all_clusters() -> int:
    # Disabled clusters are still reconciled: their running jobs must reach an end.
    ids = list(Cluster.objects.values_list("pk", flat=True))
    for pk in ids:
        reconcile_cluster.delay(pk)
    return len(ids)


@shared_task(name="clusters.redrive", bind=True, ignore_result=True)
def redrive_lost_handoffs(self: Task) -> str:
    """Send again, within seconds, the dispatches, cancels and evictions whose message was
    lost (``clusters.redrive``); the reconcile's minute stays the backstop. The queue is
    counted through the app this task is bound to, the project's (``config.celery``)."""
    result = redrive.lost_handoffs_redrive(queued=redrive.clusters_queue_length(self.app))
    dispatch_job_enqueue(result.dispatch)
    for job_id in result.cancel:
        cancel_job_enqueue(job_id)
    evict_job_enqueue_many(result.evict)
    return result.message


@shared_task(name="clusters.enforce_deadlines", acks_late=True, ignore_result=True)
def enforce_deadlines(now: str | None = None) -> str:
    """Stop jobs past their max runtime or whose pods cannot start (``clusters.deadlines``),
    then ask for their Volcano Jobs' deletion. Beat sends it without ``now``; a given ISO
    moment judges that moment instead (a replay, or a test on kubesim's clock). Idempotent:
    only the worker whose compare-and-set won enqueues the delete."""
    moment = dt.datetime.fromisoformat(now) if now else None
    result = deadlines.deadlines_enforce(now=moment)
    for job_id in result.cancel:
        cancel_job_enqueue(job_id)
    evict_job_enqueue_many(result.evict)
    return result.message


# ---------------------------------------------------------------------------------------------
# Hooks (called on commit by the scheduling cycle and the portal's cancel)
# ---------------------------------------------------------------------------------------------
DISPATCH_BATCH = 20


def dispatch_job_enqueue(job_ids: Iterable[int]) -> None:
    """Hand admitted jobs over: one message per job for a few, batches of 20 for many."""
    ids = list(job_ids)
    try:
        if len(ids) <= 2:
            for job_id in ids:
                dispatch_job.delay(job_id)
            return
        for start in range(0, len(ids), DISPATCH_BATCH):
            dispatch_jobs.delay(ids[start : start + DISPATCH_BATCH])
    except Exception:  # broker down: the reconcile finds the jobs still ADMITTED
        log.warning("could not enqueue dispatch of %d job(s)", len(ids), exc_info=True)


def sync_inventory_enqueue(cluster_id: int) -> None:
    """Read the cluster's inventory again soon (a node came back: see
    ``clusters.foreign_use.portal_pods_left_behind``); the minute's sync is the backstop."""
    try:
        sync_inventory.delay(cluster_id)
    except Exception:
        log.warning("could not enqueue an inventory sync of cluster %s", cluster_id, exc_info=True)


def evict_job_enqueue_many(job_ids: Iterable[int]) -> None:
    for job_id in job_ids:
        evict_job_enqueue(job_id)


def evict_job_enqueue(job_id: int) -> None:
    try:
        evict_job.delay(job_id)
    except Exception:
        log.warning("could not enqueue eviction of job %s", job_id, exc_info=True)


def cancel_job_enqueue(job_id: int) -> None:
    try:
        cancel_job.delay(job_id)
    except Exception:
        log.warning("could not enqueue cancel of job %s", job_id, exc_info=True)


BINDINGS_REFRESH_GAP = 5  # seconds: an over-count seen by every cycle asks once per gap


def bindings_refresh_request(cluster_ids: Iterable[int]) -> None:
    """The scheduler's books over-count a node on these clusters: read their bindings again."""
    for cluster_id in cluster_ids:
        try:
            if cache.add(f"clusters:bindings-refresh:{cluster_id}", 1, BINDINGS_REFRESH_GAP):
                refresh_bindings.delay(cluster_id)
        except Exception:  # the inventory's next sync corrects the plans anyway
            log.warning("could not request a bindings refresh of cluster %s", cluster_id)


def queue_sync_request(*_: object, **__: object) -> None:
    """Quotas or weights changed: sync every cluster's queues soon (coalesced)."""
    try:
        if cache.add(QUEUE_SYNC_PENDING_KEY, 1, timeout=30):
            sync_all_queues.delay()
    except Exception:
        log.warning("could not request a queue sync; beat runs one", exc_info=True)


def _request_cycle() -> None:
    cycle_request()
