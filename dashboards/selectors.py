"""Read models of the dashboards: what the pages and the REST API show, scoped to the caller.

Scoping (``docs/decisions.md``, "Fair share shows every team"): team-level aggregates — names,
weights, quotas, GPU counts, shares, wait percentiles — are visible to every logged-in user,
because fairness can only be judged by comparison; anything about a job (its name, owner,
image, reason) only to the job's team, through ``portal.access``. With
``GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS=false`` other teams fold into "Other teams". Per-user
usage is a team's own business: only its members (and platform admins) see it.

Every selector runs a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.cache import cache
from django.db import connection, models
from django.db.models import (
    Aggregate,
    BigIntegerField,
    Count,
    DateTimeField,
    F,
    FloatField,
    Func,
    Max,
    Sum,
)
from django.db.models.functions import TruncDay, TruncMonth
from django.utils import timezone

from dashboards.live import (
    NO_MODEL,
    POOL_FIGURES,
    LiveState,
    ModelInfo,
    ModelSummary,
    NodeState,
    PoolCell,
    TeamInfo,
    TeamStanding,
)
from dashboards.models import (
    HourRun,
    JobUtilization,
    MetricsSource,
    PoolHour,
    PoolMinute,
    QueueWait,
    SnapshotRun,
    TeamHour,
    TeamMinute,
    TeamModelHour,
    TeamModelMinute,
)
from portal.access import team_roles_of
from portal.errors import ApplicationError
from portal.models import Job, JobState
from scheduling.cycle import engine_config
from scheduling.models import UsageRecord

AnyUser = AbstractBaseUser | AnonymousUser
OTHER_TEAMS = "Other teams"


# ---------------------------------------------------------------------------------------------
# Who sees which team
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeamScope:
    """The caller's teams and whether other teams appear by name."""

    own: frozenset[int]
    show_others: bool
    staff: bool = False

    def visible(self, team_id: int) -> bool:
        return self.show_others or self.staff or team_id in self.own

    def label(self, team: TeamInfo) -> str:
        return team.name if self.visible(team.id) else OTHER_TEAMS


def team_scope(*, user: AnyUser) -> TeamScope:
    """``own``: the teams the caller is a member of (for a platform admin too, who sees every
    team anyway but should not find 200 idle teams marked "yours")."""
    own = frozenset(team_roles_of(user))
    return TeamScope(
        own=own,
        show_others=settings.GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS,
        staff=bool(getattr(user, "is_staff", False)),
    )


# ---------------------------------------------------------------------------------------------
# Parsing times, ranges and steps (pages and the API share these)
# ---------------------------------------------------------------------------------------------
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str, *, name: str) -> dt.timedelta:
    """``90s``, ``15m``, ``24h``, ``7d`` or plain seconds."""
    text = (value or "").strip().lower()
    if text.isdigit() and len(text) <= 9:
        seconds = int(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise ApplicationError(
                f"{name} must be a duration like 15m, 24h or 7d.",
                fields={name: ["Use a number of seconds or a duration like 15m, 24h, 7d."]},
            )
        seconds = int(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0 or seconds > 400 * 86400:
        raise ApplicationError(
            f"{name} is out of range.", fields={name: ["Between 1 second and 400 days."]}
        )
    return dt.timedelta(seconds=seconds)


def parse_instant(value: str, *, name: str, now: dt.datetime) -> dt.datetime:
    """An ISO 8601 time (UTC when it has no offset) or a duration ago (``7d`` = now − 7 days)."""
    text = (value or "").strip()
    if _DURATION.match(text.lower()) or text.isdigit():
        return now - parse_duration(text, name=name)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ApplicationError(
            f"{name} must be an ISO 8601 time or a duration like 7d.",
            fields={name: ["Use e.g. 2025-01-31T12:00:00Z or 7d."]},
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    if not dt.datetime(1970, 1, 2, tzinfo=dt.UTC) <= moment <= now + dt.timedelta(days=1):
        raise ApplicationError(f"{name} is out of range.", fields={name: ["Too far off."]})
    return moment


@dataclass(frozen=True)
class ChartRange:
    """A chart's window, where its points come from and how densely they are drawn."""

    key: str
    label: str
    span: dt.timedelta
    resolution: Literal["minute", "hour"]
    every: int = 1
    """Draw every n-th sample (newest included): 24 h of minutes is drawn every 10 minutes."""


RANGES = {
    r.key: r
    for r in (
        ChartRange("1h", "last hour", dt.timedelta(hours=1), "minute"),
        ChartRange("24h", "last 24 hours", dt.timedelta(hours=24), "minute", every=10),
        ChartRange("7d", "last 7 days", dt.timedelta(days=7), "hour"),
        ChartRange("30d", "last 30 days", dt.timedelta(days=30), "hour"),
    )
}
DEFAULT_RANGE = "24h"


def chart_range(key: str | None) -> ChartRange:
    return RANGES.get(key or DEFAULT_RANGE, RANGES[DEFAULT_RANGE])


class Epoch(Func):
    """A time as whole seconds since the Unix epoch, computed in SQL.

    Charts key their points by instant; reading thousands of datetimes through Django costs
    ~10 µs each in parsing alone, integers next to nothing.
    """

    output_field = BigIntegerField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::bigint", **extra
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="CAST(ROUND((julianday(%(expressions)s) - 2440587.5) * 86400) AS INTEGER)",
            **extra,
        )


def _utc(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _sample_times(rng: ChartRange, now: dt.datetime) -> list[int]:
    """The snapshot instants (epoch seconds) a chart over ``rng`` draws, oldest first."""
    if rng.resolution == "minute":
        runs: type[models.Model] = SnapshotRun
        start = now - rng.span
    else:  # an hour counts when any of it lies in the range
        runs = HourRun
        start = (now - rng.span).replace(minute=0, second=0, microsecond=0) - dt.timedelta(
            microseconds=1
        )
    ats = list(
        runs.objects.filter(at__gt=start, at__lte=now)
        .order_by("-at")
        .annotate(ts=Epoch("at"))
        .values_list("ts", flat=True)
    )
    return sorted(ats[:: rng.every])


def _window_filter(times: Sequence[int], rng: ChartRange) -> dict[str, Any]:
    bounds = {"at__gte": _utc(times[0]), "at__lte": _utc(times[-1])}
    if rng.every == 1:
        return bounds
    return {**bounds, "at__in": [_utc(t) for t in times]}


# ---------------------------------------------------------------------------------------------
# Charts of teams over time
# ---------------------------------------------------------------------------------------------
@dataclass
class Series:
    label: str
    values: list[float]
    own: bool = False

    @property
    def average(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0

    @property
    def peak(self) -> float:
        return max(self.values, default=0.0)


@dataclass
class Chart:
    """Data for one chart drawn in the browser (``static/js/charts.js``) and its table."""

    kind: Literal["stacked", "lines"]
    title: str
    unit: str
    range: ChartRange
    times: list[int] = field(default_factory=list)
    """Instants of the points, epoch seconds (UTC)."""
    series: list[Series] = field(default_factory=list)
    note: str = ""

    @property
    def empty(self) -> bool:
        return not self.times or not self.series

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "unit": self.unit,
            "range": self.range.key,
            "x": list(self.times),
            "series": [
                {"label": s.label, "values": [round(v, 4) for v in s.values], "own": s.own}
                for s in self.series
            ],
        }


TEAM_SOURCES: dict[tuple[str, bool], type[models.Model]] = {
    ("minute", False): TeamMinute,
    ("hour", False): TeamHour,
    ("minute", True): TeamModelMinute,
    ("hour", True): TeamModelHour,
}


POOL_SOURCES: dict[str, type[models.Model]] = {"minute": PoolMinute, "hour": PoolHour}


def _ranking(
    *,
    rng: ChartRange,
    times: Sequence[dt.datetime],
    base: Any,
    model: ModelInfo | None,
    value: Any,
    rank_by_latest: bool,
) -> list[tuple[float, int]]:
    """(total, team id), largest first: over the latest sample, or over the whole range —
    from the hourly rows when the range draws sampled minutes (24 h of minutes for 200 teams
    is 288,000 rows; its hours are 4,800), from the drawn samples otherwise."""
    if rank_by_latest:
        ranked = base.filter(at=_utc(times[-1]))
    elif rng.every > 1:
        hourly = TEAM_SOURCES[("hour", model is not None)].objects.filter(
            at__gte=_utc(times[0]) - dt.timedelta(hours=1), at__lte=_utc(times[-1])
        )
        ranked = hourly.filter(gpu_model_id=model.id) if model is not None else hourly
        if not ranked.exists():  # a new portal: no hour is over yet
            ranked = base
    else:
        ranked = base
    rows = ranked.values("team_id").annotate(total=Sum(value)).order_by()
    return sorted(((r["total"] or 0.0, r["team_id"]) for r in rows), key=lambda x: (-x[0], x[1]))


def _team_chart(
    *,
    scope: TeamScope,
    teams: dict[int, TeamInfo],
    rng: ChartRange,
    now: dt.datetime,
    value: Any,
    model: ModelInfo | None,
    top: int,
    rank_by_latest: bool,
    rest_from_pool: bool,
) -> tuple[list[int], list[Series]]:
    """The top ``top`` visible teams by ``value`` over the range and, with ``rest_from_pool``,
    one series for the rest (other or hidden teams): the pool's allocated GPUs at each instant
    minus the chosen teams', which costs one row per (cluster, model) and instant instead of
    one per team. A handful of queries, whatever the number of teams or points."""
    times = _sample_times(rng, now)
    if not times:
        return [], []
    window = _window_filter(times, rng)
    base = TEAM_SOURCES[(rng.resolution, model is not None)].objects.filter(**window)
    if model is not None:
        base = base.filter(gpu_model_id=model.id)
    totals = _ranking(
        rng=rng, times=times, base=base, model=model, value=value, rank_by_latest=rank_by_latest
    )
    chosen = [t for total, t in totals if total > 0 and scope.visible(t) and t in teams][:top]
    index = {t: i for i, t in enumerate(times)}
    series = {t: [0.0] * len(times) for t in chosen}
    if chosen:
        for at, team_id, v in (
            base.filter(team_id__in=chosen)
            .annotate(ts=Epoch("at"), v=value)
            .values_list("ts", "team_id", "v")
        ):
            if at in index:
                series[team_id][index[at]] = float(v or 0.0)
    out = [
        Series(scope.label(teams[t]), series[t], own=t in scope.own)
        for t in sorted(chosen, key=lambda t: -sum(series[t]))
    ]
    if rest_from_pool:
        pool = POOL_SOURCES[rng.resolution].objects.filter(**window)
        if model is not None:
            pool = pool.filter(gpu_model_id=model.id)
        rest = [0.0] * len(times)
        per_instant = pool.values("at").annotate(ts=Epoch("at"), v=Sum("gpus_allocated"))
        for at, v in per_instant.values_list("ts", "v"):
            if at in index:
                i = index[at]
                rest[i] = max(0.0, float(v or 0.0) - sum(s.values[i] for s in out))
        if any(rest):
            out.append(Series(OTHER_TEAMS, rest))
    return times, out


def team_allocation_chart(
    *,
    scope: TeamScope,
    live: LiveState,
    range_key: str | None = None,
    model: ModelInfo | None = None,
    top: int = 8,
) -> Chart:
    """GPUs allocated over time, stacked by team (the pool overview's chart)."""
    rng = chart_range(range_key)
    times, series = _team_chart(
        scope=scope,
        teams=live.teams,
        rng=rng,
        now=live.now,
        value=F("gpus_allocated"),
        model=model,
        top=top,
        rank_by_latest=False,
        rest_from_pool=True,
    )
    title = f"GPUs allocated by team, {rng.label}" + (f" ({model.key})" if model else "")
    note = (
        "one sample every 10 minutes"
        if rng.every == 10
        else ("hourly averages" if rng.resolution == "hour" else "one sample a minute")
    )
    return Chart("stacked", title, "GPUs", rng, times, series, note)


def share_history_chart(
    *, scope: TeamScope, live: LiveState, range_key: str | None = None, top: int = 8
) -> Chart:
    """Each team's dominant share (allocation + weighted usage) over time, in percent."""
    rng = chart_range(range_key or "7d")
    usage_weight = engine_config().usage_weight
    value = (F("allocation_share") + F("usage_share") * usage_weight) * 100.0
    times, series = _team_chart(
        scope=scope,
        teams=live.teams,
        rng=rng,
        now=live.now,
        value=models.ExpressionWrapper(value, output_field=FloatField()),
        model=None,
        top=top,
        rank_by_latest=True,
        rest_from_pool=False,  # shares do not add up: there is no "rest" to draw
    )
    return Chart("lines", f"Dominant share by team, {rng.label}", "%", rng, times, series)


# ---------------------------------------------------------------------------------------------
# Pool now and over time
# ---------------------------------------------------------------------------------------------
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
    if connection.vendor == "postgresql":
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


# ---------------------------------------------------------------------------------------------
# Cluster view
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeatNode:
    node: NodeState

    @property
    def level(self) -> int:
        """0 (idle) … 4 (full): the heat-map colour step; the cell also shows the numbers."""
        n = self.node
        if n.allocatable <= 0:
            return 0
        return min(4, math.ceil(4 * n.used / n.allocatable))

    @property
    def description(self) -> str:
        n = self.node
        flags = []
        if not n.ready:
            flags.append("NotReady")
        if not n.schedulable:
            flags.append("cordoned")
        text = (
            f"{n.name}: {n.used} of {n.allocatable} GPUs used "
            f"({n.allocated} by portal jobs, {n.used_by_others} by other pods), {n.free} free"
        )
        return text + (f"; {', '.join(flags)}" if flags else "")


@dataclass
class HeatGroup:
    model: ModelInfo
    cell: PoolCell
    nodes: list[HeatNode]


@dataclass
class ClusterHeat:
    id: int
    name: str
    state: str
    groups: list[HeatGroup]
    unknown_nodes: int
    metrics: MetricsStatus


def cluster_heatmap(*, live: LiveState) -> list[ClusterHeat]:
    statuses = metrics_statuses(live=live)
    grouped: dict[tuple[int, int], list[HeatNode]] = defaultdict(list)
    for node in live.nodes:
        grouped[(node.cluster_id, node.gpu_model_id)].append(HeatNode(node))
    out = []
    for c in live.clusters.values():
        groups = [
            HeatGroup(live.models[mid], live.cells[(cid, mid)], nodes)
            for (cid, mid), nodes in grouped.items()
            if cid == c.id
        ]
        groups.sort(key=lambda g: (-g.cell.gpus_allocatable, g.model.key))
        out.append(
            ClusterHeat(
                c.id, c.name, c.state, groups, live.unknown_nodes.get(c.id, 0), statuses[c.id]
            )
        )
    return out


def idle_allocations(*, limit: int = 200) -> list[JobUtilization]:
    """Running jobs flagged idle (admin view): the job links go through the job page, which
    checks access again."""
    return list(
        JobUtilization.objects.filter(idle=True, job__state=JobState.RUNNING)
        .select_related("job", "job__team", "job__gpu_model", "cluster")
        .order_by("idle_since")[:limit]
    )


# ---------------------------------------------------------------------------------------------
# Fair share
# ---------------------------------------------------------------------------------------------
@dataclass
class Standing:
    team: TeamInfo
    label: str
    own: bool
    figures: TeamStanding
    quotas: list[tuple[str, int, int]]
    """(model key, nominal, allocated) for models where the team has either."""

    @property
    def status(self) -> str:
        f = self.figures
        if f.target_share is None:
            return "no work" if not f.gpus_allocated else "—"
        if f.allocation_share > f.target_share * 1.05:
            return "above target"
        if f.allocation_share < f.target_share * 0.95:
            return "below target"
        return "at target"


def fair_share_standings(*, scope: TeamScope, live: LiveState) -> tuple[list[Standing], int]:
    """Every visible team's standing, most entitled-to-more first (lowest weighted share), and
    how many teams were left out because they are hidden."""
    quotas: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for cell in live.team_cells.values():
        if cell.nominal or cell.gpus_allocated:
            quotas[cell.team_id].append(
                (live.models[cell.gpu_model_id].key, cell.nominal, cell.gpus_allocated)
            )
    standings, hidden = [], 0
    for team_id, figures in live.standings.items():
        team = live.teams[team_id]
        if figures.is_empty() and team_id not in scope.own:
            continue
        if not scope.visible(team_id):
            hidden += 1
            continue
        standings.append(
            Standing(team, team.name, team_id in scope.own, figures, sorted(quotas[team_id]))
        )
    standings.sort(key=lambda s: (s.figures.share, s.team.name))
    return standings, hidden


# ---------------------------------------------------------------------------------------------
# Queue waits
# ---------------------------------------------------------------------------------------------
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
    if connection.vendor == "postgresql":
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


# ---------------------------------------------------------------------------------------------
# Usage and cost
# ---------------------------------------------------------------------------------------------
Period = Literal["day", "month"]


@dataclass(frozen=True)
class UsageRow:
    period: dt.date
    model: str
    user: str | None
    gpu_hours: float
    weighted_gpu_hours: float
    cost: Decimal | None


def usage_rows(
    *,
    period: Period,
    since: dt.datetime,
    until: dt.datetime,
    team_ids: Iterable[int] | None = None,
    user_id: int | None = None,
    by_user: bool = False,
) -> list[UsageRow]:
    """GPU-hours per period and model (and user), from the usage ledger, with their cost.

    Cost is weighted GPU-hours × ``GPUPOOL_PRICE_PER_GPU_HOUR`` when that is set (an internal
    chargeback rate per A100-80GB-equivalent hour), else GPU-hours × the model's catalog price
    (unknown when the catalog has none).
    """
    rows = UsageRecord.objects.filter(hour__gte=since, hour__lt=until)
    if team_ids is not None:
        rows = rows.filter(team_id__in=list(team_ids))
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    trunc = TruncDay("hour") if period == "day" else TruncMonth("hour")
    keys = ["p", "gpu_model__key", "gpu_model__price_per_hour_usd"]
    if by_user:
        keys.append("user__username")
    grouped = (
        rows.annotate(p=trunc)
        .values(*keys)
        .annotate(h=Sum("gpu_hours"), w=Sum("weighted_gpu_hours"))
        .order_by("p", "gpu_model__key", *(["user__username"] if by_user else []))
    )
    rate = settings.GPUPOOL_PRICE_PER_GPU_HOUR
    out = []
    for r in grouped:
        h, w = float(r["h"] or 0.0), float(r["w"] or 0.0)
        if rate:
            cost: Decimal | None = Decimal(str(round(w * rate, 2)))
        elif r["gpu_model__price_per_hour_usd"] is not None:
            cost = (r["gpu_model__price_per_hour_usd"] * Decimal(str(h))).quantize(Decimal("0.01"))
        else:
            cost = None
        period_start = r["p"].date() if isinstance(r["p"], dt.datetime) else r["p"]
        user = (r.get("user__username") or "(deleted user)") if by_user else None
        out.append(UsageRow(period_start, r["gpu_model__key"], user, h, w, cost))
    return out


def usage_totals(rows: Iterable[UsageRow]) -> dict[str, Any]:
    rows = list(rows)
    costs = [r.cost for r in rows if r.cost is not None]
    return {
        "gpu_hours": sum(r.gpu_hours for r in rows),
        "weighted_gpu_hours": sum(r.weighted_gpu_hours for r in rows),
        "cost": sum(costs, Decimal("0")) if costs else None,
        "cost_complete": len(costs) == len(rows),
    }


@dataclass
class UsagePeriod:
    """One row of the usage table: a day or month, GPU-hours per model, and totals."""

    period: dt.date
    hours: list[float]
    """GPU-hours per model, in the order of the table's model columns."""
    gpu_hours: float
    weighted_gpu_hours: float
    cost: Decimal | None
    cost_complete: bool


def usage_pivot(rows: Sequence[UsageRow]) -> tuple[list[str], list[UsagePeriod]]:
    """Model columns (most GPU-hours first) and one row per period, newest first."""
    per_model: dict[str, float] = defaultdict(float)
    for r in rows:
        per_model[r.model] += r.gpu_hours
    columns = sorted(per_model, key=lambda m: (-per_model[m], m))
    index = {m: i for i, m in enumerate(columns)}
    grouped: dict[dt.date, list[UsageRow]] = defaultdict(list)
    for r in rows:
        grouped[r.period].append(r)
    out = []
    for period in sorted(grouped, reverse=True):
        group = grouped[period]
        hours = [0.0] * len(columns)
        for r in group:
            hours[index[r.model]] += r.gpu_hours
        totals = usage_totals(group)
        out.append(
            UsagePeriod(
                period,
                hours,
                totals["gpu_hours"],
                totals["weighted_gpu_hours"],
                totals["cost"],
                totals["cost_complete"],
            )
        )
    return columns, out


def usage_by_user(rows: Sequence[UsageRow]) -> list[UsageRow]:
    """Per-user rows summed over the whole range, per (user, model), most GPU-hours first."""
    grouped: dict[tuple[str, str], list[UsageRow]] = defaultdict(list)
    for r in rows:
        grouped[(r.user or "", r.model)].append(r)
    out = []
    for (user, model), group in grouped.items():
        totals = usage_totals(group)
        cost = totals["cost"] if totals["cost_complete"] else None
        out.append(
            UsageRow(
                group[0].period,
                model,
                user,
                totals["gpu_hours"],
                totals["weighted_gpu_hours"],
                cost,
            )
        )
    return sorted(out, key=lambda r: (-r.gpu_hours, r.user or "", r.model))


def usage_chart(rows: Sequence[UsageRow], *, period: Period, rng_label: str) -> Chart:
    """GPU-hours per period stacked by model."""
    periods = sorted({r.period for r in rows})
    index = {p: i for i, p in enumerate(periods)}
    per_model: dict[str, list[float]] = {}
    for r in rows:
        per_model.setdefault(r.model, [0.0] * len(periods))[index[r.period]] += r.gpu_hours
    series = sorted(
        (Series(m, v) for m, v in per_model.items()), key=lambda s: (-sum(s.values), s.label)
    )
    times = [int(dt.datetime.combine(p, dt.time(), tzinfo=dt.UTC).timestamp()) for p in periods]
    rng = ChartRange(period, rng_label, dt.timedelta(days=1), "hour")
    return Chart(
        "stacked", f"GPU-hours per {period} by model, {rng_label}", "GPU-hours", rng, times, series
    )


def job_utilization_for(*, job: Job) -> tuple[JobUtilization | None, MetricsStatus | None]:
    """The job page's utilization card: the last reading and whether metrics are usable."""
    if job.cluster_id is None:
        return None, None
    prometheus_url = getattr(job.cluster, "prometheus_url", "") if job.cluster else ""
    if not prometheus_url:
        return None, None
    reading = JobUtilization.objects.filter(job=job).first()
    source = MetricsSource.objects.filter(cluster_id=job.cluster_id).first()
    stale = timezone.now() - dt.timedelta(seconds=3 * settings.GPUPOOL_DCGM_INTERVAL)
    if source is None:
        return reading, MetricsStatus(True, False, None, "not read yet")
    fresh = source.checked_at >= stale
    return reading, MetricsStatus(
        True, source.ok and fresh, source.checked_at, source.message or ("" if fresh else "old")
    )
