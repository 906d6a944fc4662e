"""One job's dispatch (``job_dispatch``): claim the job, create its Volcano Job, record the
outcome, and give the claim back, also when the database fails mid-way."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.dispatch.claims import (
    RETRY_AFTER_WAIT,
    _claim_alone,
    _claims_release,
    _hold,
    _nothing_sent,
    _too_soon,
    after_a_database_error,
)
from clusters.dispatch.outcomes import (
    NAMESPACE_TERMINATING,
    _adopt_or_conflict,
    _fail,
    _queue_repair,
    _queue_repaired,
    _retry,
    _submitted,
    _wait_for_cluster,
    repairable,
)
from clusters.kube import KubeError
from clusters.manifests import job_manifest, submission_uid
from clusters.outcome import Outcome, backoff_seconds, job_for_task
from portal.models import Job, JobState
from portal.workers import worker_name
from rules import volcano

log = logging.getLogger(__name__)


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
