"""A job's attempts: each run from an admission to its end, with where it ran and its logs.

The job row describes the current (or last) run. A run that ends in a requeue (preempted, or
pods the cluster could not place) would lose its placement when the row is reset for the
next admission, so ``job_transition`` hands the row as it was to :func:`attempt_archive`
first. Attempt *n* of a job is its *n*-th admission: archived attempts are numbered 1, 2, …
and the current run is the next number.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from portal.models import AttemptLog, Job, JobAttempt, JobEvent

# What the archive needs of the row before a requeue clears it (read under the row lock).
ARCHIVED_FIELDS = (
    "cluster__name",
    "gpu_model__key",
    "node_plan",
    "placement",
    "volcano_job_name",
    "admitted_at",
    "started_at",
)


def attempt_archive(
    *, job_id: int, before: Mapping[str, Any], reason: str, message: str, now: dt.datetime
) -> JobAttempt:
    """Keep the run a requeue just ended; call under the job's row lock, in its transaction."""
    number = JobAttempt.objects.filter(job_id=job_id).count() + 1
    return JobAttempt.objects.create(
        job_id=job_id,
        number=number,
        cluster_name=before.get("cluster__name") or "",
        gpu_model_key=before.get("gpu_model__key") or "",
        node_plan=before.get("node_plan") or [],
        placement=before.get("placement") or {},
        volcano_job_name=before.get("volcano_job_name") or "",
        admitted_at=before.get("admitted_at"),
        started_at=before.get("started_at"),
        ended_at=now,
        end_reason=reason,
        end_message=message,
    )


@dataclass
class AttemptView:
    """One attempt as pages and the API show it: archived, or the job row's current run."""

    number: int
    current: bool
    cluster: str
    gpu_model: str
    node_plan: list[str]
    placement: dict[str, Any]
    volcano_job_name: str
    admitted_at: dt.datetime | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    end_reason: str
    end_message: str
    logs: list[AttemptLog] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        """Whether this run was ever placed (a queued job's next run has not been)."""
        return self.admitted_at is not None


def _current(job: Job, number: int) -> AttemptView:
    return AttemptView(
        number=number,
        current=True,
        cluster=job.cluster.name if job.cluster else "",
        gpu_model=job.gpu_model.key if job.gpu_model else "",
        node_plan=list(job.node_plan or []),
        placement=dict(job.placement or {}) if job.cluster_id else {},
        volcano_job_name=job.volcano_job_name,
        admitted_at=job.admitted_at,
        started_at=job.started_at,
        ended_at=job.finished_at if job.is_terminal else None,
        end_reason=str(job.state) if job.is_terminal else "",
        end_message="",
    )


def _archived(a: JobAttempt) -> AttemptView:
    return AttemptView(
        number=a.number,
        current=False,
        cluster=a.cluster_name,
        gpu_model=a.gpu_model_key,
        node_plan=list(a.node_plan or []),
        placement=dict(a.placement or {}),
        volcano_job_name=a.volcano_job_name,
        admitted_at=a.admitted_at,
        started_at=a.started_at,
        ended_at=a.ended_at,
        end_reason=a.end_reason,
        end_message=a.end_message,
    )


def job_attempts(job: Job) -> list[AttemptView]:
    """Every attempt of ``job``, oldest first: the archived runs, then the current one when
    it has been placed (a job waiting again after a preemption has no current run yet)."""
    views = [_archived(a) for a in JobAttempt.objects.filter(job_id=job.pk).order_by("number")]
    current = _current(job, len(views) + 1)
    if current.ran or not views:
        views.append(current)
    return views


def job_attempt(job: Job, number: int, *, with_logs: bool = True) -> AttemptView | None:
    """Attempt ``number`` of ``job`` (1-based), with its kept logs; None if there is none."""
    found = next((a for a in job_attempts(job) if a.number == number), None)
    if found is not None and with_logs:
        found.logs = list(AttemptLog.objects.filter(job_id=job.pk, attempt=number))
    return found


def attempt_events(job: Job, attempt: AttemptView) -> QuerySet[JobEvent]:
    """The part of the job's timeline that belongs to ``attempt``: from its admission to its
    end (the current run: to now)."""
    events = job.events.select_related("actor")
    if attempt.admitted_at is not None:
        events = events.filter(created_at__gte=attempt.admitted_at)
    if attempt.ended_at is not None and not attempt.current:
        events = events.filter(created_at__lte=attempt.ended_at)
    return events
