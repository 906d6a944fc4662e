"""What the cluster tasks (dispatch, cancel, eviction) share: the job as they load it, the
:class:`Outcome` they return, their backoff, and the facts they note on a job's timeline."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Subquery
from django.utils import timezone

from portal.models import Job, JobEvent
from portal.notifications import RESTART_FACTS, RESUMED_FACT, notify_job_fact

MAX_BACKOFF_SECONDS = 60.0
# A server's Retry-After is honoured up to this: a misconfigured proxy answering "a day" must
# not park a job for a day, nor outlast the broker's visibility timeout (1 h), after which
# Redis would deliver the countdown task a second time.
MAX_RETRY_AFTER_SECONDS = 300.0


@dataclass(frozen=True)
class Outcome:
    """What a task should do next: nothing, or run again in ``retry_in`` seconds."""

    done: bool
    message: str = ""
    retry_in: float | None = None
    # Jobs of a cluster that answered again after being marked unreachable, whose waits were
    # cut short: the task enqueues their dispatch now (see ``clusters.dispatch``).
    woken: tuple[int, ...] = ()


def job_event_record(job: Job, reason: str, message: str, *, at: dt.datetime | None = None) -> None:
    """A fact about a job that does not change its state (from_state == to_state), at ``at``
    (the moment the fact was decided, where times are measured from it), else now.

    The state is the row's as the event is inserted, read by the insert itself, not the
    caller's copy: a dispatch that made an inference job's endpoint still held the job it
    loaded ADMITTED, and its ``Endpoint`` event said ADMITTED on a job already RUNNING."""
    state_now = Subquery(Job.objects.filter(pk=job.pk).values("state")[:1])
    event = JobEvent.objects.create(
        job_id=job.pk,
        created_at=at or timezone.now(),
        from_state=state_now,
        to_state=state_now,
        reason=reason[:64],
        message=message,
    )
    if reason in RESTART_FACTS or reason == RESUMED_FACT:
        notify_job_fact(event)  # it changes the job's status (RESTARTING): its owner hears of it


def backoff_seconds(attempt: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter; a server's Retry-After is a floor, not a hint."""
    base = settings.GPUPOOL_DISPATCH_BACKOFF_MS / 1000.0
    ceiling = min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1)))
    delay = random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not a secret
    if retry_after is not None:
        floor = min(retry_after, MAX_RETRY_AFTER_SECONDS)
        delay = max(delay, floor + random.uniform(0, base / 2))  # noqa: S311
    return delay


def jobs_for_tasks() -> Any:
    """Jobs with what a dispatch reads (the scheduler's explanation and reason are left out:
    they are the largest columns and no manifest needs them). The team's policy comes along
    for the pods' grace period, so a batch costs no statement per job."""
    return Job.objects.select_related("cluster", "gpu_model", "team", "team__policy").defer(
        "placement", "gpu_models", "team__description"
    )


def job_for_task(job_id: int) -> Job | None:
    return jobs_for_tasks().filter(pk=job_id).first()
