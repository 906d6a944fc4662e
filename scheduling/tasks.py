"""Celery tasks of the scheduler: thin wrappers around the cycle and the usage ledger."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from scheduling import estimates
from scheduling.cycle import run_cycle
from scheduling.snapshot import engine_config, snapshot_load
from scheduling.usage import usage_account

log = logging.getLogger(__name__)

CYCLE_PENDING_KEY = "scheduling:cycle-requested"
CYCLE_STARTED_KEY = "scheduling:cycle-started-at"
# How soon a cycle that found another one running tries again.
CYCLE_BUSY_RETRY_SECONDS = 0.2


@shared_task(name="scheduling.run_cycle", ignore_result=True)
def run_cycle_task() -> None:
    # Clear the coalescing flag first: a trigger that arrives while we run enqueues another.
    cache.delete(CYCLE_PENDING_KEY)
    cache.set(CYCLE_STARTED_KEY, time.time(), timeout=60)
    if not run_cycle().ran:
        cycle_request(after=CYCLE_BUSY_RETRY_SECONDS)


@shared_task(name="scheduling.account_usage", ignore_result=True)
def account_usage_task() -> None:
    usage_account()


@shared_task(name=estimates.TASK, ignore_result=True)
def refresh_estimates_task() -> None:
    cache.delete(estimates.REQUESTED_KEY)  # first: a request during the run owes another
    estimates_refresh_now()


def estimates_refresh_now() -> int | None:
    """Load the pool as a cycle would and recompute every queued job's estimate; None when
    another refresh is running (single flight; the next cycle asks again, and beat runs one
    every few seconds, so nothing is owed)."""
    if not cache.add(estimates.RUNNING_KEY, 1, timeout=600):
        return None
    try:
        config = engine_config()
        loaded = snapshot_load(now=timezone.now(), config=config)
        return estimates.estimates_refresh(
            snapshot=loaded.snapshot, config=config, job_pk=loaded.job_pk
        )
    finally:
        cache.delete(estimates.RUNNING_KEY)


def cycle_request(*, after: float = 0.0) -> None:
    """Ask for a cycle soon; many requests within a moment become one task (coalesced).

    A request that arrives while a cycle runs is owed a cycle after it (the running one may
    have loaded its snapshot before the job was queued): its task finds the lock taken and
    asks again ``after`` a moment, instead of leaving the job to beat's next tick.

    Triggered cycles start at least ``GPUPOOL_SCHEDULER_MIN_GAP_MS`` apart: under a stream of
    submits, back-to-back cycles would each reload every running job to admit a handful of new
    ones, while one cycle a few hundred milliseconds later admits them all at once.

    Best effort by design: the job table is the truth and beat runs a cycle every few seconds,
    so a broker hiccup here delays a job, it never loses one, and never fails the request.
    """
    try:
        if cache.add(CYCLE_PENDING_KEY, 1, timeout=30):
            try:
                delay = max(after, _until_gap_over())
                run_cycle_task.apply_async(countdown=delay or None)
            except Exception:
                cache.delete(CYCLE_PENDING_KEY)  # no task owes this flag: let the next ask
                raise
    except Exception:  # broker or cache down: beat's next cycle covers it
        log.warning("could not request a scheduling cycle; beat will run one", exc_info=True)


def _until_gap_over() -> float:
    """Seconds until the minimum gap since the last cycle's start has passed (0 when it has)."""
    gap = settings.GPUPOOL_SCHEDULER_MIN_GAP_MS / 1000
    started = cache.get(CYCLE_STARTED_KEY) if gap else None
    if started is None:
        return 0.0
    return min(gap, max(0.0, float(started) + gap - time.time()))
