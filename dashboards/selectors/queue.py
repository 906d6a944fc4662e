"""Queue waits: percentiles of the wait from QUEUED to RUNNING, and what is queued now."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import (
    Aggregate,
    Count,
    FloatField,
    Max,
)

from dashboards.live import LiveState
from dashboards.live_types import NO_MODEL, ModelInfo, TeamInfo
from dashboards.models import (
    QueueWait,
)
from dashboards.selectors.scope import TeamScope
from portal import db

PERCENTILES = (0.5, 0.9, 0.99)


class _Percentiles(Aggregate):
    """PostgreSQL's ``percentile_cont`` for p50/p90/p99 in one pass (an array)."""

    function = "percentile_cont"
    template = (
        "percentile_cont(ARRAY[0.5, 0.9, 0.99]::float8[]) WITHIN GROUP (ORDER BY %(expressions)s)"
    )

    def __init__(self, expression: Any) -> None:
        from django.contrib.postgres.fields import ArrayField

        super().__init__(expression, output_field=ArrayField(FloatField()))


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks, as ``percentile_cont`` does."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = p * (len(sorted_values) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


@dataclass(frozen=True)
class WaitStats:
    team_id: int | None
    gpu_model_id: int | None
    started: int
    p50: float
    p90: float
    p99: float


def wait_stats(
    *, since: dt.datetime, until: dt.datetime, by_team: bool, team_ids: Iterable[int] | None = None
) -> list[WaitStats]:
    """Waits from QUEUED to RUNNING of jobs that started in [since, until], in seconds, per
    model (and per team when ``by_team``): count and p50/p90/p99."""
    rows = QueueWait.objects.filter(started_at__gte=since, started_at__lte=until)
    if team_ids is not None:
        rows = rows.filter(team_id__in=list(team_ids))
    keys = ["team_id", "gpu_model_id"] if by_team else ["gpu_model_id"]
    out = []
    if db.on_postgresql():
        for r in (
            rows.values(*keys).annotate(n=Count("id"), p=_Percentiles("wait_seconds")).order_by()
        ):
            p50, p90, p99 = r["p"]
            out.append(WaitStats(r.get("team_id"), r["gpu_model_id"], r["n"], p50, p90, p99))
        return out
    values: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for r in rows.values(*keys, "wait_seconds"):
        values[tuple(r[k] for k in keys)].append(r["wait_seconds"])
    for key, waits in values.items():
        waits.sort()
        p50, p90, p99 = (_percentile(waits, p) for p in PERCENTILES)
        team_id = key[0] if by_team else None
        out.append(WaitStats(team_id, key[-1], len(waits), p50, p90, p99))
    return out


WAIT_STATS_CACHE_SECONDS = 90


def wait_stats_recent(
    *,
    now: dt.datetime,
    window: dt.timedelta,
    by_team: bool,
    team_ids: Iterable[int] | None = None,
) -> list[WaitStats]:
    """``wait_stats`` over the window ending now, cached for a minute or so.

    Percentiles over a week of waits sort every one of them (a quarter of a million at the
    benchmark's scale); waits are collected once a minute, so the answer changes at most that
    often. The key holds the newest wait's id, so a newly collected wait is seen at once.
    """
    newest = QueueWait.objects.aggregate(m=Max("id"))["m"] or 0
    teams = "all" if team_ids is None else ",".join(str(t) for t in sorted(team_ids))
    key = (
        f"dashboards:waits:{connection.settings_dict['NAME']}:{newest}:"
        f"{int(window.total_seconds())}:{by_team}:{int(now.timestamp()) // 60}:{teams}"
    )
    found = cache.get(key)
    if found is None:
        found = wait_stats(since=now - window, until=now, by_team=by_team, team_ids=team_ids)
        cache.set(key, found, WAIT_STATS_CACHE_SECONDS)
    return found


@dataclass
class ModelQueue:
    model: ModelInfo | None
    queued_jobs: int = 0
    pending_gpus: int = 0
    waits: WaitStats | None = None

    @property
    def key(self) -> str:
        return self.model.key if self.model else "none"


@dataclass
class TeamQueue:
    team: TeamInfo
    model: ModelInfo | None
    queued_jobs: int = 0
    pending_gpus: int = 0
    waits: WaitStats | None = None


def queue_stats(
    *,
    scope: TeamScope,
    live: LiveState,
    window: dt.timedelta | None = None,
    by_team: bool = True,
) -> tuple[list[ModelQueue], list[TeamQueue]]:
    """Per model: what waits now and how long recent jobs waited; per visible team the same
    (unless ``by_team`` is false: the queue page shows models only)."""
    window = window or dt.timedelta(hours=settings.GPUPOOL_WAIT_WINDOW_HOURS)
    by_model: dict[int, ModelQueue] = {}
    by_team: dict[tuple[int, int], TeamQueue] = {}

    def model_of(model_id: int | None) -> ModelInfo | None:
        return live.models.get(model_id) if model_id else None

    for (team_id, model_id), (jobs, gpus) in live.queued.items():
        mq = by_model.setdefault(model_id, ModelQueue(model_of(model_id)))
        mq.queued_jobs += jobs
        mq.pending_gpus += gpus
        if scope.visible(team_id) and team_id in live.teams:
            tq = by_team.setdefault(
                (team_id, model_id), TeamQueue(live.teams[team_id], model_of(model_id))
            )
            tq.queued_jobs += jobs
            tq.pending_gpus += gpus
    for w in wait_stats_recent(now=live.now, window=window, by_team=False):
        mid = w.gpu_model_id or NO_MODEL
        by_model.setdefault(mid, ModelQueue(model_of(mid))).waits = w
    visible_ids = None if scope.show_others or scope.staff else scope.own
    team_waits = (
        wait_stats_recent(now=live.now, window=window, by_team=True, team_ids=visible_ids)
        if by_team
        else []
    )
    for w in team_waits:
        mid = w.gpu_model_id or NO_MODEL
        if w.team_id in live.teams:
            by_team.setdefault(
                (w.team_id, mid), TeamQueue(live.teams[w.team_id], model_of(mid))
            ).waits = w
    models_out = sorted(by_model.values(), key=lambda m: (m.model is None, -m.queued_jobs, m.key))
    teams_out = sorted(
        by_team.values(), key=lambda t: (t.team.name, t.model.key if t.model else "~")
    )
    return models_out, teams_out
