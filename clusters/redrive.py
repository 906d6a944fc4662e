"""Lost hand-offs sent again within seconds, not at the next reconcile a minute later.

The job table is the outbox: a message only says "look at job X now", and a job that waits
for a look that never comes is found here. Beat runs :func:`lost_handoffs_redrive` every
``GPUPOOL_REDRIVE_INTERVAL`` seconds (2). A hand-off is lost when:

* its dispatch attempt's worker stopped beating (``portal.workers``): killed mid-create, or
  between the create and the commit. The job names the worker whose attempt is in progress
  (``Job.dispatch_owner``), so this is seen a few seconds after the kill, whatever the
  attempt's lease says;
* it was due (admitted, a retry's time come, an attempt's lease over) a few seconds ago and
  nothing is queued for the clusters' workers: the message went with a Redis restart, or with
  a killed worker that had it reserved or was holding it for its countdown. While messages are
  still queued, the job may just be waiting its turn and is left to the reconcile's minute.

Sending a hand-off twice is harmless (a dispatch's create is refused 409 and adopted, a
cancel's delete finds nothing), so the rules err on the side of sending.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from celery import Celery
from django.db.models import Q
from django.utils import timezone

from portal.jobs.rowlock import jobs_update
from portal.models import Job, JobState, WorkerBeat
from portal.workers import live_workers

log = logging.getLogger(__name__)

__all__ = ["RedriveResult", "clusters_queue_length", "lost_handoffs_redrive"]

# A due dispatch not started this long after it was due, with nothing queued, is lost.
GRACE = dt.timedelta(seconds=5)
# Cancels and evictions wait a little longer: their own retries (a delete still finishing)
# come every few seconds, and a second delete only costs a request.
CLEANUP_GRACE = dt.timedelta(seconds=15)
# With messages still queued a job may just be waiting its turn (the reconcile's rule).
QUEUED_WAIT = dt.timedelta(seconds=60)
BEATS_KEPT = dt.timedelta(days=1)


@dataclass
class RedriveResult:
    dispatch: list[int] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)
    evict: list[int] = field(default_factory=list)
    dead_owners: set[str] = field(default_factory=set)

    @property
    def message(self) -> str:
        return (
            f"re-sent {len(self.dispatch)} dispatch(es), {len(self.cancel)} cancel(s), "
            f"{len(self.evict)} eviction(s)"
        )


def clusters_queue_length(app: Celery) -> int | None:
    """Messages waiting in the broker for the clusters' workers; None when unknown (a broker
    that is not Redis, or one that does not answer). ``app`` is the Celery app the redrive
    task runs in (``self.app``): its routes name the queue, its broker holds it."""
    try:
        queue = app.amqp.router.route({}, "clusters.dispatch_job")["queue"].name
    except Exception:  # an unusual route: unknown
        return None
    try:
        with app.pool.acquire(block=True, timeout=2) as conn:
            client = getattr(conn.default_channel, "client", None)
            if client is None or not hasattr(client, "llen"):
                return None
            return int(client.llen(queue))
    except Exception:
        log.debug("could not read the length of queue %s", queue, exc_info=True)
        return None


def _last_look(changed: dt.datetime, next_at: dt.datetime | None) -> dt.datetime:
    return max(changed, next_at) if next_at is not None else changed


def _unclaimed_since_read(now: dt.datetime, dead_owners: set[str]) -> Q:
    """The rows no attempt claimed, and no retry was scheduled on, since they were read at
    ``now``: each of those moves ``dispatch_next_at`` past ``now`` (a claim to the end of its
    lease, a retry to when it is due) and sets the owner it names. Clearing such a claim would
    let this re-drive's message send a second create beside the one in flight, one that could
    beat the Retry-After the first is answered with; a claim of a worker found dead is the one
    this re-drive takes back."""
    return (
        Q(dispatch_next_at__isnull=True)
        | Q(dispatch_next_at__lte=now)
        | Q(dispatch_owner__in=sorted(dead_owners))
    )


def lost_handoffs_redrive(*, queued: int | None, now: dt.datetime | None = None) -> RedriveResult:
    """Find the jobs whose hand-off was lost and stamp them as sent now; the caller sends."""
    now = now or timezone.now()
    result = RedriveResult()
    live = live_workers(now=now)
    quiet = queued == 0
    due_before = now - (GRACE if quiet else QUEUED_WAIT)
    rows = Job.objects.filter(
        state__in=[JobState.ADMITTED, JobState.CANCELLING, JobState.PREEMPTING]
    ).values_list("pk", "state", "dispatch_owner", "dispatch_next_at", "state_changed_at")
    for pk, state, owner, next_at, changed in rows:
        last = _last_look(changed, next_at)
        if state == JobState.ADMITTED:
            if owner and owner not in live:
                result.dead_owners.add(owner)
                result.dispatch.append(pk)
            elif last < due_before:
                result.dispatch.append(pk)
        elif last < now - (CLEANUP_GRACE if quiet else QUEUED_WAIT):
            (result.cancel if state == JobState.CANCELLING else result.evict).append(pk)
    # Rows locked in id order (portal.jobs.rowlock): a dispatch batch may hold some of them.
    if result.dispatch:
        jobs_update(
            Job.objects.filter(pk__in=result.dispatch, state=JobState.ADMITTED).filter(
                _unclaimed_since_read(now, result.dead_owners)
            ),
            dispatch_next_at=now,
            dispatch_owner="",
        )
    for ids, state in ((result.cancel, JobState.CANCELLING), (result.evict, JobState.PREEMPTING)):
        if ids:
            jobs_update(Job.objects.filter(pk__in=ids, state=state), dispatch_next_at=now)
    if result.dispatch or result.cancel or result.evict:
        gone = ", ".join(sorted(result.dead_owners))
        log.info("%s%s", result.message, f" (workers gone: {gone})" if gone else "")
    WorkerBeat.objects.filter(seen_at__lt=now - BEATS_KEPT).delete()
    return result
