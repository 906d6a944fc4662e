"""Synthetic snapshot history for charts in tests and screenshots: smooth, known curves instead
of thousands of snapshot runs."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

from django.utils import timezone

from dashboards.models import (
    HourRun,
    PoolHour,
    PoolMinute,
    SnapshotRun,
    TeamHour,
    TeamMinute,
)
from dashboards.snapshots import hour_floor, minute_floor


def team_gpus(base: int, index: int, step: int) -> int:
    """A team's allocation at sample ``step``: a daily-ish wave around ``base``."""
    return max(0, round(base + 0.4 * base * math.sin(step / 45 + index)))


def seed_history(
    *,
    teams: Sequence[tuple[int, int]],
    cluster_id: int,
    model_id: int,
    capacity: int,
    minutes: int = 0,
    hours: int = 0,
    now: dt.datetime | None = None,
) -> None:
    """``teams``: (team id, typical GPUs). Writes ``minutes`` minute samples and ``hours``
    hourly samples ending now, with the pool row holding the teams' sum."""
    now = now or timezone.now()
    last_minute = minute_floor(now)
    runs, team_rows, pool_rows = [], [], []
    for k in range(minutes):
        at = last_minute - dt.timedelta(minutes=minutes - 1 - k)
        total = 0
        for index, (team_id, base) in enumerate(teams):
            gpus = team_gpus(base, index, k)
            total += gpus
            team_rows.append(
                TeamMinute(
                    at=at,
                    team_id=team_id,
                    gpus_allocated=gpus,
                    gpus_running=gpus,
                    allocation_share=gpus / capacity,
                    share=gpus / capacity,
                )
            )
        runs.append(SnapshotRun(at=at, taken_at=at, gpus_allocated=min(total, capacity)))
        pool_rows.append(
            PoolMinute(
                at=at,
                cluster_id=cluster_id,
                gpu_model_id=model_id,
                gpus_total=capacity,
                gpus_allocatable=capacity,
                gpus_allocated=min(total, capacity),
                gpus_free=max(0, capacity - total),
            )
        )
    SnapshotRun.objects.bulk_create(runs, ignore_conflicts=True)
    TeamMinute.objects.bulk_create(team_rows, ignore_conflicts=True)
    PoolMinute.objects.bulk_create(pool_rows, ignore_conflicts=True)
    last_hour = hour_floor(now) - dt.timedelta(hours=1)
    hour_runs, team_hours, pool_hours = [], [], []
    for k in range(hours):
        at = last_hour - dt.timedelta(hours=hours - 1 - k)
        total = 0
        for index, (team_id, base) in enumerate(teams):
            gpus = team_gpus(base, index, k * 7)
            total += gpus
            team_hours.append(
                TeamHour(
                    at=at,
                    team_id=team_id,
                    gpus_allocated=gpus,
                    gpus_allocated_peak=gpus,
                    gpus_running=gpus,
                    allocation_share=gpus / capacity,
                    share=gpus / capacity,
                )
            )
        hour_runs.append(
            HourRun(
                at=at,
                samples=60,
                gpus_allocated=min(total, capacity),
                gpus_allocated_peak=min(total, capacity),
            )
        )
        pool_hours.append(
            PoolHour(
                at=at,
                cluster_id=cluster_id,
                gpu_model_id=model_id,
                gpus_total=capacity,
                gpus_allocatable=capacity,
                gpus_allocated=min(total, capacity),
                gpus_free=max(0, capacity - total),
            )
        )
    HourRun.objects.bulk_create(hour_runs, ignore_conflicts=True)
    TeamHour.objects.bulk_create(team_hours, ignore_conflicts=True)
    PoolHour.objects.bulk_create(pool_hours, ignore_conflicts=True)


def seed_minute(
    at: dt.datetime,
    teams: dict[int, int],
    *,
    cluster_id: int,
    model_id: int,
    capacity: int,
    shares: dict[int, tuple[float, float]] | None = None,
) -> None:
    """One minute's snapshot as ``snapshot_take`` writes it: ``teams`` maps team id → GPUs
    allocated (teams with 0 get no row, as the writer leaves them out), ``shares`` team id →
    (allocation share, usage share) for the fair-share series."""
    at = minute_floor(at)
    total = sum(teams.values())
    SnapshotRun.objects.create(at=at, taken_at=at, gpus_allocated=total)
    PoolMinute.objects.create(
        at=at,
        cluster_id=cluster_id,
        gpu_model_id=model_id,
        gpus_total=capacity,
        gpus_allocatable=capacity,
        gpus_allocated=total,
        gpus_free=max(0, capacity - total),
    )
    shares = shares or {}
    TeamMinute.objects.bulk_create(
        TeamMinute(
            at=at,
            team_id=team_id,
            gpus_allocated=teams.get(team_id, 0),
            gpus_running=teams.get(team_id, 0),
            allocation_share=shares.get(team_id, (teams.get(team_id, 0) / capacity, 0.0))[0],
            usage_share=shares.get(team_id, (0.0, 0.0))[1],
        )
        for team_id in set(teams) | set(shares)
        if teams.get(team_id) or any(shares.get(team_id, ()))
    )
