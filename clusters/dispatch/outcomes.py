"""What an attempt's create led to, written on the job: submitted (the Volcano Job recorded,
an inference job exposed), adopted after a 409 with the same submission UID, retried with
backoff, waiting for an unreachable cluster, repaired once (a missing team queue or
namespace), or failed in the API server's own words."""

from __future__ import annotations

import datetime as dt
import logging
import random
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from clusters.clients import (
    ClusterUnavailable,
    cluster_client,
    cluster_reachable_mark,
    cluster_unreachable_mark,
    job_namespace_ensure,
)
from clusters.kube import KubeError
from clusters.models import VolcanoJobRecord
from clusters.outcome import (
    MAX_BACKOFF_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    Outcome,
    backoff_seconds,
    job_event_record,
)
from clusters.queues import queues_sync
from clusters.serving import serving_expose
from portal import db
from portal.jobs.rowlock import jobs_update
from portal.jobs.state import job_transition
from portal.models import Job, JobEvent, JobState
from portal.telemetry import observe_dispatch
from rules import volcano

log = logging.getLogger(__name__)


# A create that lost its transition finds the job in one of these states only when another
# delivery created the Volcano Job and won: the object is that winner's, so it stays. In any
# other state (cancelled, preempted, requeued) the object just created is deleted.
CREATED_BY_A_WINNER = frozenset({JobState.SUBMITTED, JobState.RUNNING})


# Admission errors a retry cannot fix but a queue sync can: the team's queue is missing or
# closed on the cluster (it is created by the queue sync, which may not have run yet).
QUEUE_PROBLEMS = ("unable to find job queue", "can only submit job to queue with state")


def repairable(exc: KubeError, namespace: str) -> bool:
    """Whether a refused create lacks what the portal itself makes on a cluster: the team's
    queue (missing or closed) or the job namespace (``namespaces "gp-x" not found``)."""
    if any(p in exc.message for p in QUEUE_PROBLEMS):
        return True
    return exc.not_found and f'namespaces "{namespace}" not found' in exc.message


def _fail(job: Job, reason: str, message: str) -> Outcome:
    job_transition(
        job_id=job.pk,
        expected=JobState.ADMITTED,
        to=JobState.FAILED,
        reason=reason,
        message=message,
    )
    log.info("job %s failed to dispatch: %s", job.pk, message)
    return Outcome(done=True, message=message)


def _retry(job: Job, attempt: int, problem: str, retry_after: float | None = None) -> Outcome:
    """Back off, or fail the job once its attempts are spent.

    The due time goes on the row so the reconcile, which re-enqueues jobs left ADMITTED too
    long, does not start a second retry chain beside one that is only waiting.
    """
    if attempt >= settings.GPUPOOL_DISPATCH_MAX_ATTEMPTS:
        return _fail(
            job,
            "DispatchFailed",
            f"Could not create the Volcano Job after {attempt} attempts: {problem}",
        )
    delay = backoff_seconds(attempt, retry_after)
    now = timezone.now()
    floor: dict[str, Any] = {}
    if retry_after is not None:
        floor["dispatch_not_before"] = now + dt.timedelta(
            seconds=min(retry_after, MAX_RETRY_AFTER_SECONDS)
        )
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        dispatch_next_at=now + dt.timedelta(seconds=delay), dispatch_owner="", **floor
    )
    # At ``now``, the moment the Retry-After floor is counted from: the wait a user reads off
    # the timeline (this event to the create) is never shorter than the one the cluster asked.
    job_event_record(
        job, "DispatchRetry", f"Attempt {attempt}: {problem}; retrying in {delay:.1f} s", at=now
    )
    return Outcome(done=False, message=problem, retry_in=delay)


def cluster_wait_seconds(since: dt.datetime, now: dt.datetime) -> float:
    """How long a job waits for a cluster that has not answered since ``since``: half the
    outage so far (jittered), at least the first backoff, at most a minute. A blip is retried
    within a second or two; a long outage costs a connection attempt per job per minute."""
    base = settings.GPUPOOL_DISPATCH_BACKOFF_MS / 1000.0
    ceiling = min(MAX_BACKOFF_SECONDS, max(base, (now - since).total_seconds() / 2))
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not a secret


def _wait_for_cluster(job: Job, problem: str) -> Outcome:
    """The cluster cannot be reached (refused, unresolvable, TLS refused, no answer, its
    credentials refused): no verdict on the job, which keeps its place and its attempts and is
    tried again after a wait that grows with the outage. The cluster is marked unreachable
    (its page and the API say so) until a call gets through."""
    assert job.cluster is not None
    since = cluster_unreachable_mark(job.cluster, problem)
    now = timezone.now()
    delay = cluster_wait_seconds(since, now)
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        dispatch_attempts=Greatest(F("dispatch_attempts") - 1, 0),
        dispatch_next_at=now + dt.timedelta(seconds=delay),
        dispatch_owner="",
    )
    job_event_record(
        job,
        "DispatchRetry",
        f"{problem}; cluster {job.cluster.name} unreachable since {since:%Y-%m-%d %H:%M:%S} "
        f"UTC; retrying in {delay:.1f} s (not counted against the job's attempts)",
    )
    return Outcome(done=False, message=problem, retry_in=delay)


def _cluster_answered(job: Job) -> list[int]:
    """A create got through: the cluster is reachable. If it had been marked otherwise, the
    jobs waiting for it are due now rather than at the end of their wait; returns them, for
    the task to enqueue (this module never imports the tasks that import it)."""
    waiting: list[int] = []
    if job.cluster is not None and cluster_reachable_mark(job.cluster):
        # Only jobs waiting out a backoff: one whose create is in flight holds a claim, and
        # waking it would hand a second create to whoever comes next.
        waiting = list(
            Job.objects.filter(
                cluster_id=job.cluster_id,
                state=JobState.ADMITTED,
                dispatch_owner="",
                dispatch_next_at__gt=timezone.now(),
            ).values_list("pk", flat=True)
        )
        if waiting:
            # Every batch that finds the cluster back wakes the same jobs: one lock order.
            jobs_update(
                Job.objects.filter(pk__in=waiting, state=JobState.ADMITTED, dispatch_owner=""),
                dispatch_next_at=timezone.now(),
            )
    return waiting


_RECORD_FIELDS = [
    "cluster",
    "namespace",
    "name",
    "submission_uid",
    "uid",
    "phase",
    "retry_count",
    "pods",
    "reported",
    "created_at",
    "seen_at",
    "deleted_at",
]


def _records_upsert(rows: list[tuple[Job, str, dict[str, Any], str]]) -> None:
    """Upsert VolcanoJobRecords in one statement (a requeued job already has one), in job id
    order: the records' row locks, and the key-share locks their foreign keys take on the
    jobs, then follow the one order of job rows (``portal.jobs.rowlock``)."""
    now = timezone.now()
    values = []
    for job, namespace, obj, uid in sorted(rows, key=lambda row: row[0].pk):
        meta = obj.get("metadata") or {}
        values.append(
            {
                "job_id": job.pk,
                "cluster_id": job.cluster_id,
                "namespace": namespace,
                "name": meta.get("name", ""),
                "submission_uid": uid,
                "uid": str(meta.get("uid") or ""),
                "phase": str(((obj.get("status") or {}).get("state") or {}).get("phase") or ""),
                "retry_count": 0,
                "pods": {},
                "reported": [],
                "created_at": now,
                "seen_at": now,
                "deleted_at": None,
            }
        )
    db.upsert_rows(VolcanoJobRecord, values, unique="job", update=_RECORD_FIELDS)


def _record(job: Job, namespace: str, obj: dict[str, Any], uid: str) -> None:
    _records_upsert([(job, namespace, obj, uid)])


def _observe_submitted(jobs: list[Job]) -> None:
    """Admission → created latency for the dispatch histogram (never fatal)."""
    for job in jobs:
        try:
            observe_dispatch(cluster=str(job.cluster), admitted_at=job.admitted_at)
        except Exception:  # metrics must never fail a dispatch
            log.debug("could not observe dispatch latency", exc_info=True)


def _delete_quietly(job: Job, namespace: str, name: str, uid: str | None = None) -> None:
    """Best effort: remove an object this dispatch made for a job that moved on."""
    try:
        client = cluster_client(job.cluster)  # type: ignore[arg-type]
        client.delete_job(namespace, name, uid=uid)
    except (KubeError, ClusterUnavailable) as exc:
        if not (isinstance(exc, KubeError) and exc.not_found):
            log.warning("could not delete %s/%s of job %s: %s", namespace, name, job.pk, exc)


def _expose(created: list[tuple[Job, str, dict[str, Any]]]) -> None:
    """Give the inference jobs just submitted their Service (and Ingress), owned by the Volcano
    Job just created. After the transition, never before: the job is SUBMITTED whether or not
    this works, and an endpoint that could not be made is made by the next reconcile
    (``clusters.serving``) instead of failing a job whose pods are already starting."""
    for job, namespace, obj in created:
        if job.serves:
            meta = obj.get("metadata") or {}
            serving_expose(
                job=job,
                namespace=namespace,
                owner_uid=str(meta.get("uid") or "") or None,
                volcano_name=str(meta.get("name") or "") or None,
            )


QUEUE_REPAIR = "QueueRepair"


# The API server's words for a create into a namespace that is being deleted (403).
NAMESPACE_TERMINATING = "because it is being terminated"


# Repairs one admission may ask for: a cluster that lost its state may first lack the queue,
# then (once its old namespace is finally gone) the namespace.
MAX_REPAIRS = 2


def _queue_repaired(job: Job) -> bool:
    """Whether this admission already had its team's namespace and queue repaired as often as
    it may (then a refusal for a missing or closed queue is final: retrying cannot fix what a
    repair did not, e.g. a team with no quota it could use on this cluster has no queue to
    sync)."""
    events = JobEvent.objects.filter(job_id=job.pk, reason=QUEUE_REPAIR)
    if job.admitted_at is not None:
        events = events.filter(created_at__gte=job.admitted_at)
    return events.count() >= MAX_REPAIRS


def _queue_repair(job: Job, problem: str, namespace: str) -> None:
    """Make the job namespace again if the cluster lacks it, and sync the cluster's queues
    (which also makes every team's namespace), because the create was refused for want of
    either."""
    assert job.cluster is not None
    job_event_record(
        job,
        QUEUE_REPAIR,
        f"{problem}; making namespace {namespace} and the team queues of {job.cluster} again "
        "where missing, and trying again.",
    )
    try:
        trouble = job_namespace_ensure(cluster_client(job.cluster), namespace)
        if trouble:
            log.warning("job %s: %s", job.pk, trouble)
        queues_sync(cluster=job.cluster)
    except Exception:  # the retry that follows reports the real problem
        log.warning("repair of %s failed during dispatch", job.cluster.name, exc_info=True)


def _adopt_or_conflict(job: Job, attempt: int, namespace: str, name: str, uid: str) -> Outcome:
    try:
        existing = cluster_client(job.cluster).get_job(namespace, name)  # type: ignore[arg-type]
    except ClusterUnavailable as exc:
        return _wait_for_cluster(job, f"cluster {job.cluster} is unavailable: {exc}")
    except KubeError as exc:
        if exc.cluster_unreachable:
            return _wait_for_cluster(job, exc.message)
        if exc.not_found:  # deleted between our create and our read: try again, bounded
            return _retry(job, attempt, f"the Volcano Job {namespace}/{name} went away")
        return _retry(job, attempt, exc.message, exc.retry_after)
    meta = existing.get("metadata") or {}
    theirs = (meta.get("annotations") or {}).get(volcano.ANNOTATION_SUBMISSION_UID)
    if theirs == uid:
        return _submitted(job, namespace, existing, uid, adopted=True)
    if meta.get("deletionTimestamp"):
        return _retry(job, attempt, f"an earlier Volcano Job {name} is still being deleted")
    job_event_record(
        job,
        "VolcanoJobConflict",
        f"A Volcano Job named {namespace}/{name} already exists and was not created by this "
        f"dispatch (submission UID {theirs or 'missing'}, expected {uid}); it was left alone.",
    )
    return _fail(
        job,
        "VolcanoJobConflict",
        f"A different Volcano Job named {namespace}/{name} already exists on {job.cluster}; "
        "the portal never overwrites it.",
    )


def _submitted(
    job: Job, namespace: str, obj: dict[str, Any], uid: str, *, adopted: bool
) -> Outcome:
    name = obj["metadata"]["name"]
    # The record goes first, so whoever sees the job SUBMITTED finds it. An adopted object may
    # already have one from the attempt that created it (with facts recorded since): keep it.
    if (
        not adopted
        or not VolcanoJobRecord.objects.filter(job_id=job.pk, submission_uid=uid).exists()
    ):
        _record(job, namespace, obj, uid)
    won = job_transition(
        job_id=job.pk,
        expected=JobState.ADMITTED,
        to=JobState.SUBMITTED,
        reason="Submitted" if not adopted else "Adopted",
        message=(
            f"Volcano Job {namespace}/{name} created on {job.cluster}."
            if not adopted
            else f"Volcano Job {namespace}/{name} already existed from an earlier attempt; adopted."
        ),
        updates={"volcano_job_name": name},
    )
    if won:
        _observe_submitted([job])
        _expose([(job, namespace, obj)])
        return Outcome(done=True, message="submitted", woken=tuple(_cluster_answered(job)))
    # Cancelled or preempted while we created it: leave nothing behind (a duplicate delivery
    # that lost to another worker's success is the one case where the object stays).
    current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    if current not in CREATED_BY_A_WINNER:
        _delete_quietly(job, namespace, name, uid=str(obj["metadata"].get("uid") or "") or None)
    return Outcome(done=True, message=f"job is {current}")
