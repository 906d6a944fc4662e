"""The time axis of the dashboards' charts: the ranges a chart can span, the step each one
aggregates, and the steps of a window that have snapshots, with the pool's totals per step.

Steps count from the Unix epoch (``EpochBucket``), so they are the same on every page and every
load; the charts built on them are :mod:`dashboards.charts`.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import models
from django.db.models import Count, Func, Max, Sum

from dashboards.live_types import ModelInfo
from dashboards.models import HourRun, PoolHour, PoolMinute, SnapshotRun
from dashboards.selectors.times import Epoch


# ---------------------------------------------------------------------------------------------
# Ranges and steps
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChartRange:
    """A chart's window, where its points come from and how long each point's step is."""

    key: str
    label: str
    span: dt.timedelta
    resolution: Literal["minute", "hour"]
    step: int
    """Seconds per point: one point is the aggregate of the snapshots in its step."""
    note: str


RANGES = {
    r.key: r
    for r in (
        ChartRange("1h", "last hour", dt.timedelta(hours=1), "minute", 60, "one point a minute"),
        ChartRange(
            "24h",
            "last 24 hours",
            dt.timedelta(hours=24),
            "minute",
            600,
            "10-minute means; the peak line is each step's highest minute",
        ),
        ChartRange(
            "7d",
            "last 7 days",
            dt.timedelta(days=7),
            "hour",
            3600,
            "hourly means; the peak line is each hour's highest minute",
        ),
        ChartRange(
            "30d",
            "last 30 days",
            dt.timedelta(days=30),
            "hour",
            3600,
            "hourly means; the peak line is each hour's highest minute",
        ),
    )
}
DEFAULT_RANGE = "24h"


def chart_range(key: str | None, default: str = DEFAULT_RANGE) -> ChartRange:
    return RANGES.get(key or default, RANGES[default])


class EpochBucket(Func):
    """The start of the ``step``-second step an instant falls in, as epoch seconds, in SQL.

    Steps count from the Unix epoch, so they are the same on every page and every load.
    """

    output_field = models.BigIntegerField()

    def __init__(self, expression: str, *, step: int) -> None:
        super().__init__(expression)
        self.step = int(step)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = (
            f"(FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / {self.step}) * {self.step})::bigint"
        )
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        epoch = "CAST(ROUND((julianday(%(expressions)s) - 2440587.5) * 86400) AS INTEGER)"
        template = f"(({epoch} / {self.step}) * {self.step})"
        return self.as_sql(compiler, connection, template=template, **extra)


def utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


# ---------------------------------------------------------------------------------------------
# Steps with data, and the pool's totals per step
# ---------------------------------------------------------------------------------------------
@dataclass
class Steps:
    """The steps of a window that have snapshots: per step start, how many runs (minutes, or
    hours) went into it, and the pool's mean and highest minute of allocated GPUs."""

    start: int
    end: int
    step: int
    runs: dict[int, int] = field(default_factory=dict)
    pool_mean: dict[int, float] = field(default_factory=dict)
    pool_peak: dict[int, float] = field(default_factory=dict)
    hours_end: dt.datetime | None = None
    """Hour-resolution windows: where the hourly rows end and minute rows take over (the
    current hour, not downsampled yet)."""
    hour_keys: tuple[int, int] = (0, 0)
    """(first, last) hourly row in the window, epoch seconds (0, 0: none)."""
    hour_ids: tuple[int, int] = (0, 0)
    """Their ids: with the times, the ranking's cache key."""

    def times(self) -> list[int]:
        return sorted(self.runs)

    def x(self, bucket: int) -> int:
        """Where a step's point is drawn: its start, or the window's start for the first."""
        return max(bucket, self.start)


def _minute_steps(
    steps: Steps, since: dt.datetime, until: dt.datetime, step: int, model: ModelInfo | None
) -> None:
    """Add minute snapshots in ``(since, until]`` to ``steps``, aggregated per ``step``."""
    runs = (
        SnapshotRun.objects.filter(at__gt=since, at__lte=until)
        .annotate(b=EpochBucket("at", step=step))
        .values("b")
        .annotate(n=Count("id"), s=Sum("gpus_allocated"), p=Max("gpus_allocated"))
        .order_by()
    )
    sums: dict[int, float] = {}
    for r in runs:
        steps.runs[r["b"]] = r["n"]
        sums[r["b"]] = float(r["s"] or 0)
        steps.pool_peak[r["b"]] = float(r["p"] or 0)
    if model is not None:  # the pool's totals of one model: summed per minute here
        sums, peaks = defaultdict(float), defaultdict(float)
        per_minute = (
            PoolMinute.objects.filter(at__gt=since, at__lte=until, gpu_model_id=model.id)
            .values("at")
            .annotate(ts=Epoch("at"), s=Sum("gpus_allocated"))
            .values_list("ts", "s")
        )
        for ts, s in per_minute:
            bucket = ts // step * step
            sums[bucket] += float(s or 0)
            peaks[bucket] = max(peaks[bucket], float(s or 0))
        steps.pool_peak.update(peaks)
    for bucket, total in sums.items():
        if bucket in steps.runs:
            steps.pool_mean[bucket] = total / steps.runs[bucket]


def window_steps(rng: ChartRange, now: dt.datetime, model: ModelInfo | None = None) -> Steps:
    """The steps of ``[now - span, now]`` that have data (a few queries)."""
    start = now - rng.span
    steps = Steps(start=int(start.timestamp()), end=int(now.timestamp()), step=rng.step)
    if rng.resolution == "minute":
        _minute_steps(steps, start, now, rng.step, model)
        return steps
    # An hour counts when any of it lies in the window; then the minutes after the last hour.
    hours = list(
        HourRun.objects.filter(at__gt=start - dt.timedelta(hours=1), at__lte=now)
        .annotate(ts=Epoch("at"))
        .order_by("at")
        .values_list("ts", "gpus_allocated", "gpus_allocated_peak", "id")
    )
    for ts, mean, peak, _id in hours:
        bucket = ts // rng.step * rng.step
        steps.runs[bucket] = 1
        steps.pool_mean[bucket] = float(mean)
        steps.pool_peak[bucket] = float(peak)
    if hours:
        steps.hour_keys = (hours[0][0], hours[-1][0])
        steps.hour_ids = (hours[0][3], hours[-1][3])
    steps.hours_end = utc(hours[-1][0] + 3600) if hours else start
    if model is not None:
        steps.pool_mean.clear()
        steps.pool_peak.clear()
        # Per (cluster, model) peaks added up: an upper bound on the model's highest minute.
        for ts, mean, peak in (
            PoolHour.objects.filter(
                at__gt=start - dt.timedelta(hours=1), at__lte=now, gpu_model_id=model.id
            )
            .values("at")
            .annotate(ts=Epoch("at"), s=Sum("gpus_allocated"), p=Sum("gpus_allocated_peak"))
            .values_list("ts", "s", "p")
        ):
            steps.pool_mean[ts] = float(mean or 0)
            steps.pool_peak[ts] = float(peak or 0)
    _minute_steps(steps, tail_since(steps), now, rng.step, model)
    return steps


def tail_since(steps: Steps) -> dt.datetime:
    """Minute rows after this instant belong to the window's tail (the hours not
    downsampled yet): the last hourly row's end, or the window's start."""
    start = utc(steps.start)
    if steps.hours_end is None or steps.hours_end <= start:
        return start
    return steps.hours_end - dt.timedelta(microseconds=1)
