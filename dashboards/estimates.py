"""Start estimates in this wing: the records of the queue simulation's estimates (each job's
likely range, and its first estimate kept to compare with its actual start) and the
calibration they give. (The estimate itself is ``scheduling.estimates``'.)

- ``estimates_record`` listens to ``portal.hooks.estimates_refreshed`` (the refresh task,
  never the submit); ``estimate_ranges`` answers ``portal.hooks.estimate_ranges``.
- ``estimate_calibration``: error by wait bucket and the share of starts inside the range,
  for platform admins (``/pool/estimates/``) and ``/metrics``.

All connected in ``DashboardsConfig``.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Subquery

from dashboards.models import StartEstimateRecord
from portal.jobs.blocker import StartRange
from portal.models import Job, JobState

# -- records of the simulation's estimates ----------------------------------------------------


def estimates_record(estimates: Mapping[int, Any], now: dt.datetime) -> int:
    """Keep each queued job's likely range and, the first time it has an estimate, that first
    estimate; mark the records of jobs that left the queue with their actual first admission.
    ``estimates``: job pk -> ``scheduling.estimates.Estimate`` (every queued job's, from the
    refresh task). Writes only what changed, in three statements; returns rows written."""
    have = {
        pk: (earliest, latest, runs, unknown)
        for pk, earliest, latest, runs, unknown in StartEstimateRecord.objects.filter(
            job_id__in=list(estimates)
        ).values_list("job_id", "earliest", "latest", "runs", "unknown")
    }
    rows = []
    for pk, e in estimates.items():
        now_range = (e.earliest, e.latest, e.runs, e.unknown)
        if e.start is None or have.get(pk) == now_range:
            continue
        rows.append(
            StartEstimateRecord(
                job_id=pk,
                first_at=e.start,
                first_earliest=e.earliest,
                first_latest=e.latest,
                first_runs=e.runs,
                first_made_at=now,
                earliest=e.earliest,
                latest=e.latest,
                runs=e.runs,
                unknown=e.unknown,
                updated_at=now,
            )
        )
    if rows:
        # A record already there keeps its first estimate: only the range now moves.
        StartEstimateRecord.objects.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["earliest", "latest", "runs", "unknown", "updated_at"],
        )
    started = (
        # Jobs cancelled while queued never start: looked at for a month, then left alone.
        StartEstimateRecord.objects.filter(
            started_at__isnull=True, first_made_at__gte=now - dt.timedelta(days=30)
        )
        .exclude(job__state=JobState.QUEUED)
        .filter(job__admitted_at__isnull=False)
        .update(
            started_at=Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("admitted_at")[:1])
        )
    )
    return len(rows) + started


def estimate_ranges(job_pks: list[int]) -> dict[int, StartRange]:
    """The recorded likely range of each of these jobs' start (those that have one)."""
    return {
        pk: StartRange(earliest, latest, runs, unknown)
        for pk, earliest, latest, runs, unknown in StartEstimateRecord.objects.filter(
            job_id__in=job_pks
        ).values_list("job_id", "earliest", "latest", "runs", "unknown")
    }


# -- calibration ------------------------------------------------------------------------------

WAIT_BUCKETS: tuple[tuple[str, float], ...] = (
    ("under 10 min", 600),
    ("10 min to 1 h", 3600),
    ("1 to 6 h", 6 * 3600),
    ("over 6 h", float("inf")),
)
"""Buckets of the actual wait, as the calibration groups the errors."""

CALIBRATION_ROWS = 20_000
"""At most this many recent starts are read (the newest)."""

SLACK = dt.timedelta(minutes=1)
"""A start this close outside the range counts as inside (a cycle's granularity)."""


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """The errors of one wait bucket (or of every start)."""

    bucket: str
    starts: int
    median_error_seconds: float | None
    p90_error_seconds: float | None
    inside: float | None
    """Share of starts inside the first estimate's range (None: no range given)."""
    early: int
    """Starts before the first estimate's point (the estimate was pessimistic)."""


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-9 * len(ordered) // 10) - 1))]


def start_errors(*, since: dt.datetime) -> list[tuple[float, float, bool | None, bool]]:
    """(absolute error, actual wait, inside the range, started early) in seconds of every job
    that started since ``since`` and had a first estimate."""
    rows = (
        StartEstimateRecord.objects.filter(started_at__gte=since)
        .order_by("-started_at")
        .values_list(
            "first_at", "first_earliest", "first_latest", "started_at", "job__submitted_at"
        )[:CALIBRATION_ROWS]
    )
    out = []
    for at, earliest, latest, started, submitted in rows:
        inside = (
            None
            if earliest is None or latest is None
            else earliest - SLACK <= started <= latest + SLACK
        )
        out.append(
            (
                abs((started - at).total_seconds()),
                max(0.0, (started - submitted).total_seconds()),
                inside,
                started < at,
            )
        )
    return out


def _row(bucket: str, errors: list[tuple[float, float, bool | None, bool]]) -> CalibrationRow:
    errs = [e for e, _, _, _ in errors]
    ranged = [i for _, _, i, _ in errors if i is not None]
    return CalibrationRow(
        bucket=bucket,
        starts=len(errors),
        median_error_seconds=statistics.median(errs) if errs else None,
        p90_error_seconds=_p90(errs) if errs else None,
        inside=sum(ranged) / len(ranged) if ranged else None,
        early=sum(1 for *_, early in errors if early),
    )


def estimate_calibration(*, now: dt.datetime, days: int = 30) -> list[CalibrationRow]:
    """The first estimates of the jobs that started in the last ``days`` against their actual
    starts, per bucket of actual wait, then all together (the last row)."""
    errors = start_errors(since=now - dt.timedelta(days=days))
    out = []
    low = 0.0
    for bucket, high in WAIT_BUCKETS:
        out.append(_row(bucket, [e for e in errors if low <= e[1] < high]))
        low = high
    out.append(_row("every start", errors))
    return out
