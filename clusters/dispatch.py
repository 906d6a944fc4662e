"""From an admitted job to a Volcano Job on its cluster (``ADMITTED → SUBMITTED``).

The job row is the outbox: each task here loads the row, checks its state, talks to the
cluster, and records the outcome with a compare-and-set, so a duplicated, late or reordered
message does nothing harmful.

Dispatch (``ADMITTED → SUBMITTED``)
    The Volcano Job's name is derived from the job's UUID, so a retried create cannot make a
    twin: it gets ``409 AlreadyExists``. The object then carries a submission UID (derived
    from the job's UUID and the admission time): the same UID means an earlier attempt of
    this very dispatch got through, and the object is adopted; another UID means someone
    else's object (or one left from an earlier admission) and it is never overwritten.
    Overload and network trouble (5xx, 429, timeouts) are retried with exponential backoff
    and full jitter, honouring ``Retry-After``, up to ``GPUPOOL_DISPATCH_MAX_ATTEMPTS``;
    what retrying cannot fix (400/422 validation, 403) fails the job with the API server's
    own words. A missing team queue or job namespace (a queue sync that has not run yet, a
    cluster whose API server restarted empty) is repaired once per admission: the team's
    namespace is made again and the cluster's queues synced, then the create is tried again;
    if it is still refused, the job fails saying why. If the job left ADMITTED while the
    create was in flight (cancelled, preempted), the object just created is deleted again.
    One attempt at a time: an attempt claims the job on its row (its worker and a lease), and
    a duplicate hand-off that finds a live claim ends without sending anything. Nothing else
    shortens or takes over a live claim: a wake when the cluster answers again, a deferral
    for a busy cluster and the reconcile leave it alone, and a batch claims only free rows.
    A claim also waits out the cluster's Retry-After as the row holds it when the claim is
    written, not as the hand-off loaded the job (one that loaded it while another attempt's
    create was in flight, and claims it just after that create was refused 429, would
    otherwise send its create at once).
    An attempt that dies on the database (PostgreSQL restarting, a lost connection) gives its
    claim back itself, on a fresh connection, so the job is sent again within seconds rather
    than at the end of the lease; a create it may have sent is adopted on its 409.

The manifest comes from ``clusters.manifests``, taking a job off its cluster (cancel,
eviction) is ``clusters.teardown``.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
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
from clusters.manifests import job_manifest, submission_uid
from clusters.models import Cluster, VolcanoJobRecord
from clusters.outcome import (
    MAX_BACKOFF_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    Outcome,
    backoff_seconds,
    job_event_record,
    job_for_task,
    jobs_for_tasks,
)
from clusters.queues import queues_sync
from clusters.serving import serving_expose
from portal import db
from portal.jobs.rowlock import conflicts_retried, jobs_update
from portal.jobs.state import (
    Change,
    job_transition,
    jobs_transition_bulk,
)
from portal.models import Job, JobEvent, JobState
from portal.telemetry import observe_dispatch
from portal.workers import live_workers, worker_name
from rules import volcano

log = logging.getLogger(__name__)

__all__ = ["job_dispatch", "job_dispatch_batch"]

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


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------
# Columns a batch dispatch never reads. Leaving them out spares their converters (four
# timestamps, two JSON documents) on every row, the largest part of loading a batch. The
# batch touches only what job_manifest, submission_uid and the transition need; anything
# unusual goes to the one-job path, which loads the job whole.
_NOT_FOR_THE_BATCH = (
    "owner",
    "gpu_models",
    "min_gpu_memory_gib",
    "requires_bf16",
    "requires_fp8",
    "min_fp16_tflops",
    "selection_policy",
    "allow_fallback",
    "priority",
    "state_changed_at",
    "submitted_at",
    "started_at",
    "finished_at",
    "volcano_job_name",
    "dispatch_next_at",
    "usage_accounted_until",
    "idempotency_key",
    "request_fingerprint",
    "cancel_reason",
    "preemption_count",
)


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


def attempt_lease() -> dt.timedelta:
    """How long an attempt in progress may take before it counts as lost even though its
    worker still beats: a create and a read-back, each up to the client's timeout, and a
    margin. (A worker that stops beating loses its attempts at once: ``clusters.redrive``.)"""
    return dt.timedelta(seconds=3 * settings.GPUPOOL_CLUSTER_TIMEOUT_SECONDS + 5)


def attempt_claim() -> dict[str, Any]:
    """What an attempt writes on its job as it starts: who makes it, until when, and one more
    create that may reach the cluster (taken back by :func:`_nothing_sent` when it did not)."""
    return {
        "dispatch_next_at": timezone.now() + attempt_lease(),
        "dispatch_owner": worker_name(),
        "creates_unsure": F("creates_unsure") + 1,
    }


def _nothing_sent(jobs: Iterable[Job]) -> None:
    """These jobs' attempts ended with proof that their create never reached the cluster (or
    was refused without effect): they no longer count as creates that may have gone through.
    Only a job whose every attempt ended so may leave an unreachable cluster
    (``clusters.status.unreachable_requeue``); a worker killed mid-create never gets here.

    Per admission (``admitted_at`` as the attempt loaded it): a late answer to an attempt of
    an earlier admission must not take back a count of the current one. One statement per
    admission time; the cycle admits a batch at one time. Rows locked in id order
    (``portal.jobs.rowlock``), as by every multi-row update of jobs."""
    by_admission: dict[dt.datetime | None, list[int]] = {}
    for job in jobs:
        by_admission.setdefault(job.admitted_at, []).append(job.pk)
    for admitted_at, ids in by_admission.items():
        jobs_update(
            Job.objects.filter(pk__in=ids, state=JobState.ADMITTED, admitted_at=admitted_at),
            creates_unsure=Greatest(F("creates_unsure") - 1, 0),
        )


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


def _too_soon(job: Job, now: dt.datetime) -> float:
    """Seconds left before the cluster's Retry-After lets this job's create go (0: go now).

    Checked where the create is sent, not where a dispatch is asked for: a wake when the
    cluster answers again, the re-drive and a duplicate hand-off all end here. This reads the
    job as its hand-off loaded it, which may predate a refusal answered since (the load came
    while another attempt's create was in flight): the claim checks the row itself again
    (:func:`not_held`)."""
    if job.dispatch_not_before is None:
        return 0.0
    return max(0.0, (job.dispatch_not_before - now).total_seconds())


def not_held(now: dt.datetime) -> Q:
    """Jobs no Retry-After holds back at ``now``: part of every claim's condition, checked on
    the row as it is locked. A hand-off that loaded the job while another attempt's create
    was in flight saw no floor; if that create is refused with a Retry-After before this
    hand-off claims, the claim, not the copy it loaded, must keep the next create back."""
    return Q(dispatch_not_before__isnull=True) | Q(dispatch_not_before__lte=now)


def _hold(job_ids: Iterable[int]) -> None:
    """Jobs held back by a Retry-After are due at its end, on their rows too, so the re-drive
    reads a scheduled wait (not a lost message) and does not send them again meanwhile. One
    statement, compared in the database: the batch path does not load ``dispatch_next_at``."""
    jobs_update(
        Job.objects.filter(pk__in=list(job_ids), state=JobState.ADMITTED).filter(
            Q(dispatch_next_at__isnull=True) | Q(dispatch_next_at__lt=F("dispatch_not_before"))
        ),
        dispatch_next_at=F("dispatch_not_before"),
    )


def _claim_alone(job: Job) -> Outcome | None:
    """Claim the job's next attempt unless another attempt holds it (None: claimed).

    Duplicate hand-offs meet here: a re-drive, a wake when the cluster answers again, or
    several deliveries held back by the same Retry-After that all come due at once. Only one
    of them may send the create; the others end, leaving the job to the attempt in flight.
    An attempt whose lease ran out, or whose worker stopped beating (killed whole), holds
    nothing, so a redelivery takes over at once. A pool child killed alone still has a
    beating worker: its claim lasts the lease, then the re-drive sends the job again. The
    attempt counter lives on the row, so it survives restarts and redeliveries."""
    now = timezone.now()
    admitted = Job.objects.filter(pk=job.pk, state=JobState.ADMITTED)
    free = admitted.filter(not_held(now))
    claim = {"dispatch_attempts": F("dispatch_attempts") + 1, **attempt_claim()}
    if free.filter(unclaimed(now)).update(**claim):
        return None
    row = admitted.values("dispatch_owner", "dispatch_not_before").first()
    if row is None:
        return Outcome(done=True, message="not admitted")
    owner, floor = row["dispatch_owner"], row["dispatch_not_before"]
    if owner not in live_workers(now=now) and free.filter(dispatch_owner=owner).update(**claim):
        return None
    if not owner and floor is not None and floor > now:
        # Refused with a Retry-After since this hand-off loaded the job: wait it out too.
        _hold([job.pk])
        wait = (floor - now).total_seconds()
        return Outcome(done=False, message=RETRY_AFTER_WAIT, retry_in=wait)
    return Outcome(done=True, message=f"an attempt by {owner or 'another worker'} is in flight")


def unclaimed(now: dt.datetime) -> Q:
    """Jobs no attempt holds: no owner, or a lease that ran out (see :func:`_claim_alone`)."""
    return Q(dispatch_owner="") | Q(dispatch_next_at__isnull=True) | Q(dispatch_next_at__lte=now)


def _claims_release(job_ids: Iterable[int]) -> None:
    """Give back this worker's claim on jobs it hands to the one-job path, which would
    otherwise find them held by the attempt that just ended."""
    jobs_update(
        Job.objects.filter(
            pk__in=list(job_ids), state=JobState.ADMITTED, dispatch_owner=worker_name()
        ),
        dispatch_owner="",
    )


RETRY_AFTER_WAIT = "the cluster asked to wait (Retry-After)"


def job_dispatch(*, job_id: int) -> Outcome:
    """Create the Volcano Job of an ADMITTED job and move it to SUBMITTED.

    A database error once the job is claimed (PostgreSQL restarting, a lost connection, a
    lock or statement timeout) ends the attempt, and the claim is given back at once
    (:func:`_claim_abandon`): the job is retried within a second or so instead of waiting out
    the lease. A create that may have reached the cluster is adopted on the retry's 409.
    """
    job = job_for_task(job_id)
    if job is None or job.state != JobState.ADMITTED:
        return Outcome(done=True, message="not admitted")
    wait = _too_soon(job, timezone.now())
    if wait:
        _hold([job.pk])
        return Outcome(done=False, message=RETRY_AFTER_WAIT, retry_in=wait)
    claimed = _claim_alone(job)
    if claimed is not None:
        return claimed
    progress = _AttemptProgress()
    try:
        return _dispatch_claimed(job, progress)
    except (OperationalError, InterfaceError) as exc:
        outcome = _claim_abandon(job, progress, exc)
        if outcome is None:
            raise  # the original error: the claim is left to its lease
        return outcome


@dataclass
class _AttemptProgress:
    """How far a claimed one-job attempt got, for :func:`_claim_abandon`: ``unsent`` while
    the claim's count of a create that may reach the cluster can still be taken back (no
    create sent yet, and not taken back already)."""

    unsent: bool = True


def _dispatch_claimed(job: Job, progress: _AttemptProgress) -> Outcome:
    """The claimed part of :func:`job_dispatch`: the create and what its answer calls for."""
    attempt = job.dispatch_attempts + 1
    if job.cluster is None or job.gpu_model is None:
        return _fail(job, "DispatchFailed", "The job was admitted without a cluster or GPU model.")
    try:
        namespace, manifest = job_manifest(job)
    except volcano.ManifestError as exc:
        return _fail(job, "InvalidJob", f"The job cannot run as a Volcano Job: {exc}")
    name, uid = manifest["metadata"]["name"], submission_uid(job)
    try:
        client = cluster_client(job.cluster)
    except ClusterUnavailable as exc:
        # Settled before the statement: a decrement that fails half-way is not made twice.
        progress.unsent = False
        _nothing_sent([job])
        return _wait_for_cluster(job, f"cluster {job.cluster.name} is unavailable: {exc}")
    # From here the create may reach the cluster: the claim's count stays unless the answer
    # proves otherwise (``changed_nothing``).
    progress.unsent = False
    try:
        created = client.create_job(namespace, manifest)
    except KubeError as exc:
        if exc.changed_nothing:
            _nothing_sent([job])
        if exc.already_exists:
            return _adopt_or_conflict(job, attempt, namespace, name, uid)
        if exc.cluster_unreachable:
            return _wait_for_cluster(job, exc.message)
        if exc.transient:
            return _retry(job, attempt, exc.message, exc.retry_after)
        if exc.status == 403 and NAMESPACE_TERMINATING in exc.message:
            # A namespace being deleted (a cluster that lost its state): gone in a moment, and
            # then made again by the repair below.
            return _retry(job, attempt, exc.message)
        if repairable(exc, namespace) and not _queue_repaired(job):
            _queue_repair(job, exc.message, namespace)
            _claims_release([job.pk])
            return Outcome(done=False, message=exc.message, retry_in=1.0)
        return _fail(job, "SubmitRejected", f"The cluster refused the job: {exc.message}")
    return _submitted(job, namespace, created, uid, adopted=False)


def _claim_abandon(job: Job, progress: _AttemptProgress, exc: Exception) -> Outcome | None:
    """A claimed one-job attempt died on the database: give its claim back and ask for a
    retry, or None (the caller raises the original error) when the claim could not be given
    back or the job's attempts are spent.

    Left alone, the claim would hold the job for its whole lease (3 × the cluster timeout +
    5 s): the worker still beats, so neither a redelivery nor the re-drive may take it over.
    Given back, the job is due again after a backoff (``dispatch_next_at``, so the re-drive
    reads a scheduled retry, and sends the job itself if the retry's message is lost).
    Nothing is sent twice: a create this attempt sent is met by a 409 on the retry and
    adopted (same submission UID), and a job this attempt did move on is no longer ADMITTED,
    so the give-back finds nothing (and the retry ends at once). The claim's count of a
    create that may have reached the cluster is taken back only if none was sent.

    The attempt counts against the job's attempts (unlike a cluster outage), which sets the
    backoff: a database error that comes back every time (a row someone keeps locked) is
    retried less and less often, and once the attempts are spent it is raised and the job
    left to the re-drive's pace, never a loop of creates a second apart. A database error
    never fails the job: it is not the job's fault.
    """
    attempt = job.dispatch_attempts + 1
    retry = attempt < settings.GPUPOOL_DISPATCH_MAX_ATTEMPTS
    delay = backoff_seconds(attempt) if retry else 0.0
    due = timezone.now() + dt.timedelta(seconds=delay)
    unsent = progress.unsent
    log.warning("dispatch of job %s failed on the database; giving its claim back: %s", job.pk, exc)

    def give_back() -> bool:
        released = Job.objects.filter(
            pk=job.pk, state=JobState.ADMITTED, dispatch_owner=worker_name()
        ).update(dispatch_owner="", dispatch_next_at=due)
        if released and unsent:
            _nothing_sent([job])
        return bool(released)

    if not after_a_database_error(give_back, what=f"the claim of job {job.pk}") or not retry:
        return None
    return Outcome(
        done=False,
        message=f"the database failed ({type(exc).__name__}); retrying in {delay:.1f} s",
        retry_in=delay,
    )


T = TypeVar("T")

# Pauses between tries to write what a dispatch that lost its database must leave behind (its
# claims given back): a restart of PostgreSQL is back within seconds (8 s in the soak,
# docs/reliability.md). No try starts later than DATABASE_BACK_SECONDS after the first (a host
# that does not answer costs a whole connect timeout per try); the task's worker slot waits,
# with nothing it could do without a database. Past these, the claims' lease frees the jobs.
DATABASE_BACK_WAITS = (0.0, 0.5, 1.0, 2.0, 4.0, 4.0)
DATABASE_BACK_SECONDS = 12.0


def after_a_database_error(write: Callable[[], T], *, what: str) -> T | None:
    """Run ``write`` in a transaction right after a database error, on a fresh connection
    where the one that failed is unusable; its result, or None if the database did not
    answer in time (:data:`DATABASE_BACK_WAITS`). Never raises a database error: the caller
    still holds the original one.

    Django drops a dead connection only when a transaction's rollback fails on it; a
    statement outside a transaction (an upsert, a compare-and-set) leaves it in place, and
    every statement after it fails again (``the connection is closed``) until the task ends.
    Inside a caller's transaction the connection is the caller's to keep, so ``write`` gets
    one try there, in a savepoint.
    """
    own = not connection.in_atomic_block
    give_up = time.monotonic() + DATABASE_BACK_SECONDS
    for wait in DATABASE_BACK_WAITS if own else (0.0,):
        if wait:
            if time.monotonic() + wait > give_up:
                break
            time.sleep(wait)
        try:
            if own:
                connection.close_if_unusable_or_obsolete()
            with transaction.atomic():
                return write()
        except (DatabaseError, InterfaceError):
            log.debug("could not write %s yet", what, exc_info=True)
    log.warning("could not write %s: the database does not answer; its lease frees it", what)
    return None


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


# ---------------------------------------------------------------------------------------------
# Dispatch in batches (what the scheduling cycle's admissions use)
# ---------------------------------------------------------------------------------------------
_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}
_pools_lock = threading.Lock()


def _create_pool(cluster: Cluster) -> ThreadPoolExecutor:
    """The process's threads for creates in flight to one cluster, reused by every batch.

    One pool per cluster, sized by that cluster's own ``creates_in_flight``: a slow cluster
    then holds only its own threads, and a cluster allowed more creates gets them (its
    client's semaphore bounds what reaches it either way). Threads are not free to start, so
    pools live as long as the process; a changed limit replaces the cluster's pool.
    """
    size = max(1, cluster.creates_in_flight or settings.GPUPOOL_CLUSTER_CREATES_IN_FLIGHT)
    with _pools_lock:
        sized = _pools.get(cluster.pk)
        if sized is not None and sized[0] == size:
            return sized[1]
        if sized is not None:
            sized[1].shutdown(wait=False)  # its threads end once their creates are done
        pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"dispatch-{cluster.pk}")
        _pools[cluster.pk] = (size, pool)
        return pool


@dataclass(frozen=True)
class _Attempt:
    job: Job
    namespace: str
    manifest: dict[str, Any]
    client: Any


def _create(item: _Attempt) -> dict[str, Any] | Exception:
    """The created object, or what went wrong: one job's surprise must not sink the batch."""
    try:
        return dict(item.client.create_job(item.namespace, item.manifest))
    except Exception as exc:  # KubeError, or anything unforeseen: decided per job below
        return exc


def _submit(item: _Attempt) -> Future[dict[str, Any] | Exception]:
    try:
        return _create_pool(item.job.cluster).submit(_create, item)  # type: ignore[arg-type]
    except RuntimeError:  # another batch just replaced the pool (its limit changed): run here
        done: Future[dict[str, Any] | Exception] = Future()
        done.set_result(_create(item))
        return done


def _creates_run(work: list[_Attempt]) -> list[dict[str, Any] | Exception]:
    """Run the creates concurrently, each on its cluster's pool; results in ``work``'s order."""
    futures = [_submit(item) for item in work]
    return [future.result() for future in futures]


def _refused_in_batch(
    item: _Attempt, exc: KubeError, repaired: set[tuple[int, str]], later: dict[int, float]
) -> None:
    """Decide what a create the cluster refused in a batch needs, in ``later``.

    Overload and network trouble back off here, honouring Retry-After, exactly as the one-job
    path would (handing them straight to it would send the same create again at once). A
    missing team queue or namespace gets one repair per cluster, namespace and batch. The rest
    (409s, validation)
    goes to the one-job path now, which reads the 409 or fails the job with the API's words.
    """
    job = item.job
    if exc.cluster_unreachable:
        outcome = _wait_for_cluster(job, exc.message)
        later[job.pk] = outcome.retry_in or 0.0
        return
    if exc.transient:
        outcome = _retry(job, job.dispatch_attempts + 1, exc.message, exc.retry_after)
        if outcome.retry_in is not None:
            later[job.pk] = outcome.retry_in
        return
    if repairable(exc, item.namespace):
        key = (job.cluster_id, item.namespace)
        if key not in repaired:
            repaired.add(key)  # type: ignore[arg-type]
            _queue_repair(job, exc.message, item.namespace)
        else:
            job_event_record(
                job, QUEUE_REPAIR, f"{exc.message}; the namespace and team queues were repaired."
            )
        later[job.pk] = 1.0  # a queue the sync just opened may take a moment to be served
        return
    later[job.pk] = 0.0


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch leaves to do: ``later``, the jobs to hand to the one-job path
    (:func:`job_dispatch`, which owns 409s and failures), each with the seconds to wait first
    (a backoff when the cluster asked for one); ``woken``, jobs whose wait for a cluster that
    answered again was cut short, to dispatch now."""

    later: dict[int, float] = field(default_factory=dict)
    woken: list[int] = field(default_factory=list)


def job_dispatch_batch(*, job_ids: list[int]) -> BatchOutcome:
    """Dispatch many ADMITTED jobs with a few statements for the lot (see
    :class:`BatchOutcome` for what it leaves to do).

    The happy path is what costs at scale: one query loads the jobs, one bumps their attempt
    counters, the creates run concurrently (bounded by the cluster's creates in flight and
    rate limit), then one bulk compare-and-set moves the created ones to SUBMITTED and one
    statement records them. Anything unusual goes to the careful path one job at a time.

    A database error once the jobs are claimed (a deadlock still lost after its retries, a
    lost connection) gives the claims back at once and hands every claimed job to the one-job
    path (:func:`_batch_abandon`), instead of leaving them held until their lease runs out.
    """
    jobs = list(
        jobs_for_tasks().defer(*_NOT_FOR_THE_BATCH).filter(pk__in=job_ids, state=JobState.ADMITTED)
    )
    now = timezone.now()
    waits = {job.pk: _too_soon(job, now) for job in jobs}
    held = {pk: wait for pk, wait in waits.items() if wait}
    if held:
        _hold(held)
    jobs = [job for job in jobs if job.pk not in held]
    if not jobs:
        return BatchOutcome(later=held)
    claim = attempt_claim()
    ids = [j.pk for j in jobs]
    # Two batches (or a batch and a wake) may reach for the same rows: one lock order.
    jobs_update(
        Job.objects.filter(pk__in=ids, state=JobState.ADMITTED).filter(
            unclaimed(now), not_held(now)
        ),
        dispatch_attempts=F("dispatch_attempts") + 1,
        **claim,
    )
    # A job another attempt holds is left to it (its create is in flight), and so is one
    # that attempt's create got a Retry-After for since the load (its retry is scheduled):
    # only the rows this claim wrote go on.
    mine = set(
        Job.objects.filter(
            pk__in=ids,
            state=JobState.ADMITTED,
            dispatch_owner=claim["dispatch_owner"],
            dispatch_next_at=claim["dispatch_next_at"],
        ).values_list("pk", flat=True)
    )
    jobs = [job for job in jobs if job.pk in mine]
    if not jobs:
        return BatchOutcome(later=held)
    progress = _Progress(later=dict(held))
    try:
        return _batch_run(jobs, progress)
    except (DatabaseError, InterfaceError) as exc:
        return _batch_abandon(jobs, held, progress, exc)


@dataclass
class _Progress:
    """How far a claimed batch got, for :func:`_batch_abandon`: the jobs decided so far
    (``later``, as in :class:`BatchOutcome`), and whether the claim's count of a create that
    may reach the cluster is settled for every job (taken back for the jobs left behind
    before the creates; kept for the creates sent)."""

    later: dict[int, float]
    creates_counted: bool = False


def _batch_run(jobs: list[Job], progress: _Progress) -> BatchOutcome:
    """The claimed part of :func:`job_dispatch_batch`: creates, records and the transition."""
    later = progress.later
    woken: list[int] = []
    work: list[_Attempt] = []
    for job in jobs:
        if job.cluster is None or job.gpu_model is None:
            later[job.pk] = 0.0
            continue
        try:
            namespace, manifest = job_manifest(job)
            client = cluster_client(job.cluster)
        except (volcano.ManifestError, ClusterUnavailable):
            later[job.pk] = 0.0
            continue
        work.append(_Attempt(job, namespace, manifest, client))
    _nothing_sent(j for j in jobs if j.pk in later)  # left to the one-job path, nothing sent
    progress.creates_counted = True

    done: list[tuple[Job, str, dict[str, Any], str]] = []
    repaired: set[tuple[int, str]] = set()
    results = _creates_run(work)
    _nothing_sent(
        item.job
        for item, result in zip(work, results, strict=True)
        if isinstance(result, KubeError) and result.changed_nothing
    )
    for item, result in zip(work, results, strict=True):
        if isinstance(result, KubeError):
            _refused_in_batch(item, result, repaired, later)
        elif isinstance(result, Exception):
            log.warning("create of job %s failed unexpectedly", item.job.pk, exc_info=result)
            later[item.job.pk] = 1.0  # the one-job path tries again, and reports what it sees
        else:
            done.append((item.job, item.namespace, result, submission_uid(item.job)))
    if done:
        won = conflicts_retried(lambda: _submitted_in_batch(done))
        _observe_submitted([job for job, *_ in done if job.pk in won])
        _expose([(job, ns, obj) for job, ns, obj, _ in done if job.pk in won])
        for one_per_cluster in {job.cluster_id: job for job, *_ in done}.values():
            woken.extend(_cluster_answered(one_per_cluster))
        for job, namespace, obj, _ in done:
            if job.pk in won:
                continue
            current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
            if current == JobState.ADMITTED:
                later[job.pk] = 0.0  # row locked by someone else: try again alone
            elif current not in CREATED_BY_A_WINNER:
                _delete_quietly(job, namespace, obj["metadata"]["name"], obj["metadata"].get("uid"))
    claimed = {job.pk for job in jobs}
    _claims_release(pk for pk in later if pk in claimed)
    return BatchOutcome(later=later, woken=woken)


def _submitted_in_batch(done: list[tuple[Job, str, dict[str, Any], str]]) -> set[int]:
    """Record the created Volcano Jobs and move their jobs to SUBMITTED; returns the ids that
    won. Records and transition commit together: one WAL flush per batch, and no moment where
    a record exists for a job still ADMITTED (the reconcile would adopt it anyway). Safe to run
    again after a deadlock or a serialization failure (:func:`conflicts_retried`): the upsert
    and the compare-and-set find the same rows again."""
    with transaction.atomic():
        _records_upsert(done)
        return jobs_transition_bulk(
            changes=[
                Change(
                    job_id=job.pk,
                    updates={"volcano_job_name": obj["metadata"]["name"]},
                    message=f"Volcano Job {ns}/{obj['metadata']['name']} created on {job.cluster}.",
                )
                for job, ns, obj, _ in done
            ],
            expected=JobState.ADMITTED,
            to=JobState.SUBMITTED,
            reason="Submitted",
        )


def _batch_abandon(
    jobs: list[Job], held: dict[int, float], progress: _Progress, exc: Exception
) -> BatchOutcome:
    """A database error after the batch claimed ``jobs``: give the claims back now and hand
    every claimed job to the one-job path, at once or after the backoff already decided for
    it. There a create that did reach the cluster meets its 409 and is adopted, and a job the
    batch did move to SUBMITTED is found no longer admitted: nothing is sent twice. Left
    alone, the claims would hold the jobs until their lease ran out (3 × the cluster timeout
    + 5 s) and the re-drive sent them again. Best effort, on a fresh connection (the one that
    failed may be dead: :func:`after_a_database_error`): if the database is still gone after
    a few seconds, the lease is what frees them."""
    log.warning(
        "dispatch batch of %d jobs failed on the database; handing them to the one-job path: %s",
        len(jobs),
        exc,
    )

    def give_back() -> None:
        if not progress.creates_counted:  # nothing was sent: none of them is on the cluster
            _nothing_sent(jobs)
        _claims_release(j.pk for j in jobs)

    after_a_database_error(give_back, what=f"the claims of {len(jobs)} jobs")
    later = dict(held)
    later.update((j.pk, progress.later.get(j.pk, 0.0)) for j in jobs)
    return BatchOutcome(later=later)
