"""The pool now and over time: the overview cards, metrics statuses and the pool history chart."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.db.models import (
    Count,
    DateTimeField,
    Func,
    Max,
    Sum,
)
from django.utils import timezone

from dashboards.live import LiveState
from dashboards.live_types import NO_MODEL, POOL_FIGURES, ModelSummary
from dashboards.models import (
    MetricsSource,
    PoolHour,
    PoolMinute,
    SnapshotRun,
)
from portal import db
from portal.errors import ApplicationError


@dataclass(frozen=True)
class MetricsStatus:
    """Whether a cluster's GPU metrics are usable: ``configured`` (it has a Prometheus URL),
    ``available`` (the last read worked and is recent)."""

    configured: bool
    available: bool
    checked_at: dt.datetime | None = None
    message: str = ""


def metrics_statuses(*, live: LiveState) -> dict[int, MetricsStatus]:
    stale = live.now - dt.timedelta(seconds=3 * settings.GPUPOOL_DCGM_INTERVAL)
    sources = {s.cluster_id: s for s in MetricsSource.objects.all()}
    out = {}
    for c in live.clusters.values():
        source = sources.get(c.id)
        if not c.prometheus_url:
            out[c.id] = MetricsStatus(configured=False, available=False)
        elif source is None:
            out[c.id] = MetricsStatus(True, False, None, "not read yet")
        else:
            fresh = source.checked_at >= stale
            message = source.message if not source.ok else ("" if fresh else "last read is old")
            out[c.id] = MetricsStatus(True, source.ok and fresh, source.checked_at, message)
    return out


@dataclass
class PoolOverview:
    now: dt.datetime
    summaries: list[ModelSummary]
    totals: dict[str, int]
    cluster_names: dict[int, str]
    last_snapshot: dt.datetime | None
    metrics_unavailable: list[str]
    unplaceable_jobs: int


def pool_overview(*, live: LiveState) -> PoolOverview:
    """The overview's cards and totals: live figures, not the last snapshot's, so a job that
    starts shows on the next refresh."""
    statuses = metrics_statuses(live=live)
    return PoolOverview(
        now=live.now,
        summaries=live.model_summaries(),
        totals=live.totals(),
        cluster_names={c.id: c.name for c in live.clusters.values()},
        last_snapshot=SnapshotRun.objects.order_by("-at")
        .values_list("taken_at", flat=True)
        .first(),
        metrics_unavailable=sorted(
            live.clusters[cid].name
            for cid, s in statuses.items()
            if s.configured and not s.available
        ),
        unplaceable_jobs=sum(j for (_t, m), (j, _g) in live.queued.items() if m == NO_MODEL),
    )


@dataclass(frozen=True)
class PoolHistory:
    since: dt.datetime
    until: dt.datetime
    step: int
    resolution: Literal["minute", "hour"]
    points: list[dict[str, Any]]


MAX_POINTS = 2000


def _auto_step(span: dt.timedelta) -> int:
    seconds = span.total_seconds()
    if seconds <= 6 * 3600:
        return 60
    if seconds <= 2 * 86400:
        return 600
    return 3600


def pool_history(
    *,
    since: dt.datetime,
    until: dt.datetime,
    step: int | None = None,
    cluster_ids: Iterable[int] | None = None,
    model_ids: Iterable[int] | None = None,
    now: dt.datetime | None = None,
) -> PoolHistory:
    """The pool's figures summed over the chosen clusters and models, averaged per ``step``.

    Points come from hourly rows when the step is an hour or more, or when the window starts
    before minute rows are kept; a step that would make more than ``MAX_POINTS`` points is
    widened. Hourly points exist for hours that are over.
    """
    now = now or timezone.now()
    if until <= since:
        raise ApplicationError("until must be after since.", fields={"until": ["After since."]})
    span = until - since
    step = step or _auto_step(span)
    step = max(step, math.ceil(span.total_seconds() / MAX_POINTS))
    minute_kept = now - dt.timedelta(days=settings.GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS)
    resolution: Literal["minute", "hour"] = (
        "hour" if step >= 3600 or since < minute_kept else "minute"
    )
    if resolution == "hour":
        step = max(step, 3600)
    source = PoolMinute if resolution == "minute" else PoolHour
    rows = source.objects.filter(at__gte=since, at__lte=until)
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=list(cluster_ids))
    if model_ids is not None:
        rows = rows.filter(gpu_model_id__in=list(model_ids))
    annotations = {
        name: (Max(name) if name == "largest_free_block" else Sum(name)) for name in POOL_FIGURES
    }
    points = []
    if db.on_postgresql():
        # Sum per step in SQL and divide by the instants in it: the average of the totals.
        per_step = (
            rows.annotate(step_start=_DateBin("at", seconds=step))
            .values("step_start")
            .annotate(instants=Count("at", distinct=True), **annotations)
            .order_by("step_start")
        )
        for r in per_step:
            point: dict[str, Any] = {"at": r["step_start"]}
            for name in POOL_FIGURES:
                v = float(r[name] or 0)
                point[name] = v if name == "largest_free_block" else round(v / r["instants"], 3)
            points.append(point)
        return PoolHistory(since, until, step, resolution, points)
    buckets: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows.values("at").annotate(**annotations).order_by("at"):
        buckets[int(r["at"].timestamp()) // step * step].append(r)
    for start in sorted(buckets):
        group = buckets[start]
        point = {"at": dt.datetime.fromtimestamp(start, tz=dt.UTC)}
        for name in POOL_FIGURES:
            values = [float(g[name] or 0) for g in group]
            point[name] = (
                max(values) if name == "largest_free_block" else round(sum(values) / len(values), 3)
            )
        points.append(point)
    return PoolHistory(since, until, step, resolution, points)


class _DateBin(Func):
    """PostgreSQL's ``date_bin``: the start of the ``seconds``-long step a time falls in,
    steps counted from the Unix epoch (so they line up with the Python path's buckets)."""

    function = "date_bin"
    template = "date_bin(%(step)s, %(expressions)s, TIMESTAMPTZ '1970-01-01 00:00:00+00')"
    output_field = DateTimeField()

    def __init__(self, expression: str, *, seconds: int) -> None:
        super().__init__(expression, step=f"interval '{int(seconds)} seconds'")
