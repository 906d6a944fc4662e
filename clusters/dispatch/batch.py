"""Dispatch in batches, what the scheduling cycle's admissions use: the jobs of one hand-off
claimed together, their creates sent through a per-cluster pool of threads, the outcomes
written in a few statements; anything unusual goes to the one-job path."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, transaction
from django.db.models import F
from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.dispatch.claims import (
    _claims_release,
    _hold,
    _nothing_sent,
    _too_soon,
    after_a_database_error,
    attempt_claim,
    not_held,
    unclaimed,
)
from clusters.dispatch.outcomes import (
    CREATED_BY_A_WINNER,
    QUEUE_REPAIR,
    _cluster_answered,
    _delete_quietly,
    _expose,
    _observe_submitted,
    _queue_repair,
    _records_upsert,
    _retry,
    _wait_for_cluster,
    repairable,
)
from clusters.kube import KubeError
from clusters.manifests import job_manifest, submission_uid
from clusters.models import Cluster
from clusters.outcome import job_event_record, jobs_for_tasks
from portal.jobs.rowlock import conflicts_retried, jobs_update
from portal.jobs.state import Change, jobs_transition_bulk
from portal.models import Job, JobState
from rules import jobspec, volcano

log = logging.getLogger(__name__)


# Columns a batch dispatch never reads. Leaving them out spares their converters (four
# timestamps, two JSON documents) on every row, the largest part of loading a batch. The
# batch touches only what job_manifest, submission_uid and the transition need; anything
# unusual goes to the one-job path, which loads the job whole. The admission has chosen the
# model already, so the fields that choose one are not read again, but for the share's size.
_MODEL_CHOSEN = tuple(f for f in jobspec.REQUIREMENT_FIELDS if f != "gpu_memory_gib")
_NOT_FOR_THE_BATCH = (
    "owner",
    *_MODEL_CHOSEN,
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
