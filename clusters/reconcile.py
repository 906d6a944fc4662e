"""The periodic reconcile: list everything the portal owns on a cluster and bring every
followed job in line with it.

Watch events are an optimization; this is the truth. It heals a dropped event, a watcher that
was down or a 410 gap, finds dispatches, cancels and evictions whose messages were lost (and
returns them for ``clusters.tasks`` to enqueue), and deletes the Volcano Jobs that cancelled
or requeued jobs left behind.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from clusters.bindings import (
    FOLLOWED_STATES,
    node_plans_apply,
    pod_bindings,
    pod_devices,
)
from clusters.clients import (
    ClusterUnavailable,
    cluster_client,
    cluster_reachable_mark,
    cluster_unreachable_mark,
)
from clusters.kube import KubeError
from clusters.models import Cluster
from clusters.observed import JobView, PodView, job_view, pod_view
from clusters.status import StatusOutcome, job_status_apply, pods_apply
from portal.jobs.state import job_transition
from portal.models import Job, JobState
from portal.workers import live_workers
from rules import volcano

log = logging.getLogger(__name__)

__all__ = ["STALE_AFTER", "ReconcileResult", "cluster_reconcile", "followed_jobs"]

S = JobState

STALE_AFTER = dt.timedelta(seconds=60)  # a task message for a job this old is presumed lost


@dataclass
class ReconcileResult:
    """What one reconcile found and did. ``redispatched``, ``to_cancel`` and ``to_evict`` are
    jobs whose message was presumed lost: the caller enqueues them
    (``clusters.tasks.cluster_reconcile_and_enqueue``), so this module never imports the
    tasks that import it."""

    ok: bool = True
    message: str = ""
    jobs: int = 0
    objects: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    redispatched: list[int] = field(default_factory=list)
    to_cancel: list[int] = field(default_factory=list)
    to_evict: list[int] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    plans_corrected: int = 0


def followed_jobs(cluster: Cluster) -> dict[uuid.UUID, Job]:
    jobs = Job.objects.filter(cluster=cluster, state__in=FOLLOWED_STATES).select_related(
        "team", "cluster", "gpu_model", "volcano"
    )
    return {j.public_id: j for j in jobs}


def cluster_reconcile(*, cluster: Cluster, now: dt.datetime | None = None) -> ReconcileResult:
    """List everything the portal owns on ``cluster`` and bring every followed job in line.

    The jobs are read *before* the lists: a job SUBMITTED by then had its object created
    earlier still, so an object missing from the later list really is gone. Work whose
    message was lost comes back in the result to be enqueued, not enqueued here.
    """
    now = now or timezone.now()
    result = ReconcileResult()
    jobs = followed_jobs(cluster)
    try:
        client = cluster_client(cluster)
        objects, _ = client.list_jobs_with_version(label_selector=volcano.managed_selector())
        pod_objects, _ = client.list_pods_with_version(label_selector=volcano.managed_selector())
    except (ClusterUnavailable, KubeError) as exc:
        message = exc.message if isinstance(exc, KubeError) else str(exc)
        Cluster.objects.filter(pk=cluster.pk).update(reconcile_error=message[:2000])
        if not isinstance(exc, KubeError) or exc.cluster_unreachable:
            since = cluster_unreachable_mark(cluster, message)
            unreachable_requeue(cluster=cluster, since=since, now=now)
        return ReconcileResult(ok=False, message=message)
    back = cluster_reachable_mark(cluster)
    views: dict[uuid.UUID, list[JobView]] = defaultdict(list)
    for obj in objects:
        if (job_object := job_view(obj)) is not None:
            views[job_object.job_uuid].append(job_object)
    pods: dict[uuid.UUID, list[PodView]] = defaultdict(list)
    for obj in pod_objects:
        pod = pod_view(obj)
        if pod is not None:
            pods[pod.job_uuid].append(pod)
    result.jobs, result.objects = len(jobs), sum(map(len, views.values()))
    # Every followed job's plan follows its pods' bindings, in one pass, before anything else.
    corrected = node_plans_apply(
        {u: b for u, b in pod_bindings(pod_objects).items() if u in jobs},
        cluster_id=cluster.pk,
        devices=pod_devices(pod_objects),
    )
    result.plans_corrected = len(corrected)
    for job in jobs.values():
        if job.pk in corrected:
            job.node_plan = corrected[job.pk]
    stale = now - STALE_AFTER
    live = live_workers(now=now) if any(j.state == S.ADMITTED for j in jobs.values()) else set()
    for job_uuid, job in jobs.items():
        if _moved_on(job, views.get(job_uuid, ())):
            continue  # requeued and started again while the lists ran: the next round's
        view = _current_run(job, views.get(job_uuid, ()))
        if job.state == S.ADMITTED:
            if (
                _dispatch_presumed_lost(job, stale, live) or (back and _waiting(job, now))
            ) and _redispatch_stamp(job, now):
                result.redispatched.append(job.pk)
            continue
        if view is not None:
            pods_apply(job=job, pods=pods.get(job_uuid, ()), plans=False)
        outcome = job_status_apply(job=job, view=view, deleted=view is None, now=now)
        result.outcomes[outcome] += 1
        if view is not None and job.state_changed_at < stale:
            if outcome == StatusOutcome.CANCELLING:
                result.to_cancel.append(job.pk)
            elif outcome == StatusOutcome.PREEMPTING:
                result.to_evict.append(job.pk)
    _delete_orphans(cluster, client, views, jobs, result)
    Cluster.objects.filter(pk=cluster.pk).update(reconciled_at=now, reconcile_error="")
    result.message = f"{result.jobs} jobs, {result.objects} Volcano Jobs; " + ", ".join(
        f"{k} {v}" for k, v in sorted(result.outcomes.items())
    )
    return result


UNREACHABLE_REQUEUE_REASON = "ClusterUnreachable"


def unreachable_requeue(*, cluster: Cluster, since: dt.datetime, now: dt.datetime) -> list[int]:
    """Jobs admitted to ``cluster``, unreachable since ``since``, go back to the queue once the
    outage has lasted ``GPUPOOL_UNREACHABLE_REQUEUE_MINUTES``, if their Volcano Job certainly
    does not exist there; returns their ids.

    Certainly: no create attempt of this admission may have reached the API server (every
    one ended refused before sending, or with a 4xx: ``Job.creates_unsure`` is 0), none is in
    progress, and no record of a created object exists. A job whose create may have gone
    through (a timeout, a reset, a worker killed mid-create) stays bound to the cluster: moved
    elsewhere it could run twice. The requeued job keeps its place in line; the cycle, which
    admits nothing to an unreachable cluster, places it on one that answers.
    """
    grace = dt.timedelta(minutes=settings.GPUPOOL_UNREACHABLE_REQUEUE_MINUTES)
    if now - since < grace:
        return []
    movable = (
        Job.objects.filter(
            cluster_id=cluster.pk, state=S.ADMITTED, creates_unsure=0, dispatch_owner=""
        )
        .exclude(volcano__created_at__gte=F("admitted_at"))
        .values_list("pk", flat=True)
    )
    minutes = (now - since).total_seconds() / 60
    message = (
        f"Cluster {cluster.name} has not answered since {since:%Y-%m-%d %H:%M:%S} UTC "
        f"({minutes:.0f} min, more than the {grace.total_seconds() / 60:.0f} min allowed) and "
        "this job's Volcano Job was never created there (no create reached its API server): "
        "back in the queue with its place in line kept, to run on a cluster that answers."
    )
    moved = []
    for pk in list(movable):
        with transaction.atomic():
            # Under the row lock: an attempt that starts now waits for this transaction, then
            # finds the job QUEUED and does nothing; one that started already counted itself.
            still = (
                Job.objects.select_for_update()
                .filter(pk=pk, state=S.ADMITTED, creates_unsure=0, dispatch_owner="")
                .values_list("pk", flat=True)
            )
            if list(still) and job_transition(
                job_id=pk,
                expected=S.ADMITTED,
                to=S.QUEUED,
                reason=UNREACHABLE_REQUEUE_REASON,
                message=message,
                now=now,
            ):
                moved.append(pk)
    if moved:
        log.warning(
            "cluster %s unreachable since %s: %d admitted jobs never created there requeued",
            cluster.name,
            since,
            len(moved),
        )
    return moved


def _waiting(job: Job, now: dt.datetime) -> bool:
    """Waiting out a backoff (for a cluster that was unreachable until this reconcile); not
    an attempt in flight, whose claim (``clusters.dispatch``) keeps a second create away."""
    return (
        not job.dispatch_owner and job.dispatch_next_at is not None and job.dispatch_next_at > now
    )


def _redispatch_stamp(job: Job, now: dt.datetime) -> bool:
    """Stamp a job the reconcile sends again, so the next reconcile (30 s on) does not send a
    second message while this one waits in a long queue; False if the row moved on since the
    reconcile read it (before its lists, which may take seconds).

    Compared with the claim as read: an attempt that claimed the job since has a create in
    flight, and clearing its claim would let this message send a second create beside it
    (one that may beat a Retry-After the first create is answered with)."""
    return bool(
        Job.objects.filter(
            pk=job.pk,
            state=S.ADMITTED,
            dispatch_owner=job.dispatch_owner,
            dispatch_next_at=job.dispatch_next_at,
        ).update(dispatch_next_at=now, dispatch_owner="")
    )


def _dispatch_presumed_lost(job: Job, stale: dt.datetime, live: set[str]) -> bool:
    """Its attempt's worker is gone, or admitted long ago with no dispatch attempted or due
    recently: its message was lost. A job waiting out a backoff, or whose attempt is slow, is
    not, and a second dispatch beside it would only double the load on a cluster that asked
    for less."""
    if job.dispatch_owner and job.dispatch_owner not in live:
        return True
    last = max(job.state_changed_at, job.dispatch_next_at or job.state_changed_at)
    return last < stale


def _current_run(job: Job, candidates: Iterable[JobView]) -> JobView | None:
    """The Volcano Job of the job's current run among those of its id: an earlier run's can
    still exist, deleted but held by pods Terminating on a node that died. One labelled with
    the run first; one made before the label existed (any run's) only when there is none."""
    candidates = list(candidates)
    exact = [v for v in candidates if v.attempt == job.attempt_number]
    return (exact or [v for v in candidates if v.attempt is None] or [None])[0]


def _moved_on(job: Job, candidates: Iterable[JobView]) -> bool:
    """Whether the cluster already holds a later run of the job than the one read before the
    lists: judged on the run read, it would look gone."""
    return any(v.attempt is not None and v.attempt > job.attempt_number for v in candidates)


def _delete_orphans(
    cluster: Cluster,
    client: Any,
    views: dict[uuid.UUID, list[JobView]],
    followed: dict[uuid.UUID, Job],
    result: ReconcileResult,
) -> None:
    """Delete Volcano Jobs left behind by cancelled or requeued portal jobs, and those of a
    followed job's earlier runs (a stop that found nothing to delete under its run's name
    while that run's create was still unrecorded is the one way to leave one).

    Finished jobs keep theirs (logs stay readable until ``ttlSecondsAfterFinished``), and an
    object whose job id this portal does not know is someone else's: never touched.
    """
    for job_uuid, job in followed.items():
        for view in views.get(job_uuid, ()):
            if view.attempt is not None and view.attempt < job.attempt_number and not view.deleting:
                _delete_orphan(client, view, result)
    loose = [u for u in views if u not in followed]
    if not loose:
        return
    states = dict(
        Job.objects.filter(public_id__in=loose, cluster=cluster).values_list("public_id", "state")
    )
    requeued = dict(
        Job.objects.filter(public_id__in=loose, state=S.QUEUED).values_list("public_id", "state")
    )
    for job_uuid in loose:
        state = states.get(job_uuid) or requeued.get(job_uuid)
        if state not in (S.CANCELLED, S.QUEUED):
            continue
        for view in views[job_uuid]:
            _delete_orphan(client, view, result)


def _delete_orphan(client: Any, view: JobView, result: ReconcileResult) -> None:
    try:
        client.delete_job(view.namespace, view.name, uid=view.uid or None)
        result.orphans_deleted.append(view.name)
    except KubeError as exc:
        if not exc.not_found:
            log.warning("could not delete orphan %s: %s", view.name, exc.message)
