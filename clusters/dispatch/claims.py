"""Who holds a job's dispatch: one attempt at a time claims the job on its row (its worker
and a lease), waits out a Retry-After the row holds, and gives the claim back when it ends,
or, when its database went away, on a fresh connection as soon as one answers."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from clusters.outcome import Outcome
from portal.jobs.rowlock import jobs_update
from portal.models import Job, JobState
from portal.workers import live_workers, worker_name

log = logging.getLogger(__name__)


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
