"""Time charts of the dashboards: teams' GPUs and fair shares over a window, usage per day.

Three rules make a chart tell the truth about time (``docs/decisions.md``, "Charts"):

* The window is the x axis: a chart spans exactly ``[now - range, now]`` (``Chart.start`` /
  ``Chart.end``), whatever data exists, and a stretch without snapshots is a gap, not a line
  drawn across it.
* A point is an aggregate of its step, never a sample: the mean of the minutes (or hours) in
  it, and for GPU counts also the highest minute, so a burst between two 10-minute marks shows.
  Means divide by the snapshots taken in the step (a team without a row in one counted zero).
* A team keeps its colour (``team_colour``: from its id, the same on every page and load), and
  the viewer's own teams are drawn by name whenever they have data in the window, however
  small; "Other teams" gathers the rest.

Every chart runs a fixed number of queries, whatever the number of teams or points. The time
axis (the ranges, their steps, the steps of a window that have data) is
:mod:`dashboards.chart_window`.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.core.cache import cache
from django.db import connection, models
from django.db.models import F, FloatField, Max, Sum

from dashboards.chart_window import (
    ChartRange,
    EpochBucket,
    Steps,
    chart_range,
    tail_since,
    utc,
    window_steps,
)
from dashboards.colours import OTHER_COLOUR, PEAK_COLOUR, key_colour, team_colour
from dashboards.live import LiveState
from dashboards.live_types import ModelInfo, TeamInfo, TeamStanding
from dashboards.models import (
    HourRun,
    TeamHour,
    TeamMinute,
    TeamModelHour,
    TeamModelMinute,
)
from dashboards.selectors.scope import OTHER_TEAMS, TeamScope
from dashboards.selectors.times import Epoch
from scheduling.snapshot import engine_config

# ---------------------------------------------------------------------------------------------
# What a chart holds
# ---------------------------------------------------------------------------------------------
Value = float | None


@dataclass
class Series:
    """One line or band: a mean per point (None: no snapshot in that step), and for GPU
    counts the highest minute per point."""

    label: str
    values: list[Value]
    own: bool = False
    colour: str = ""
    peaks: list[Value] | None = None
    key: str = ""

    @property
    def average(self) -> float:
        known = [v for v in self.values if v is not None]
        return sum(known) / len(known) if known else 0.0

    @property
    def peak(self) -> float:
        source = self.peaks if self.peaks is not None else self.values
        return max((v for v in source if v is not None), default=0.0)

    @property
    def latest(self) -> float:
        return next((v for v in reversed(self.values) if v is not None), 0.0)

    def has_data(self) -> bool:
        return any(self.values) or any(self.peaks or ())

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "key": self.key,
            "own": self.own,
            "colour": self.colour,
            "values": [_round(v) for v in self.values],
        }
        if self.peaks is not None:
            out["peaks"] = [_round(v) for v in self.peaks]
        return out


def _round(v: Value) -> Value:
    return None if v is None else round(v, 4)


@dataclass
class Chart:
    """Data for one chart drawn in the browser (``static/js/charts.js``) and its table."""

    kind: Literal["stacked", "lines"]
    title: str
    unit: str
    range_key: str
    start: int
    """The window: the x axis runs from ``start`` to ``end`` (epoch seconds, UTC)."""
    end: int
    step: int
    times: list[int] = field(default_factory=list)
    """Instants of the points, epoch seconds (UTC); a gap between them is a step with None."""
    series: list[Series] = field(default_factory=list)
    lines: list[Series] = field(default_factory=list)
    """Drawn over the stack, not stacked (the peak line)."""
    note: str = ""
    as_of: int | None = None
    """When the last point was measured: the latest snapshot, or now for a live point."""

    @property
    def empty(self) -> bool:
        return not self.times or not (self.series or self.lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "unit": self.unit,
            "range": self.range_key,
            "from": self.start,
            "to": self.end,
            "step": self.step,
            "x": list(self.times),
            "series": [s.as_json() for s in self.series],
            "lines": [s.as_json() for s in self.lines],
        }


def with_gaps(times: list[int], step: int, columns: Sequence[list[Value]]) -> list[int]:
    """Mark missing steps: where two points lie more than a step and a half apart, insert one
    point with None in every column right after the first, so the chart breaks the line there
    instead of drawing across a stretch without snapshots. Returns the new times; the columns
    are changed in place."""
    out: list[int] = []
    inserts: list[int] = []
    for i, t in enumerate(times):
        if out and t - out[-1] > step * 1.5:
            out.append(out[-1] + step)
            inserts.append(i + len(inserts))
        out.append(t)
    for column in columns:
        for position in inserts:
            column.insert(position, None)
    return out


# ---------------------------------------------------------------------------------------------
# Teams over a window
# ---------------------------------------------------------------------------------------------
TEAM_SOURCES: dict[tuple[str, bool], type[models.Model]] = {
    ("minute", False): TeamMinute,
    ("hour", False): TeamHour,
    ("minute", True): TeamModelMinute,
    ("hour", True): TeamModelHour,
}

RANKING_CACHE_SECONDS = 3 * 3600
PEAK_LABEL = "Highest minute, all teams"


def _hour_keys_within(steps: Steps) -> tuple[tuple[int, int], tuple[int, int]]:
    """Times and ids of the (first, last) hourly row of a minute-resolution window."""
    found = list(
        HourRun.objects.filter(at__gt=utc(steps.start) - dt.timedelta(hours=1))
        .annotate(ts=Epoch("at"))
        .order_by("at")
        .values_list("ts", "id")
    )
    if not found:
        return (0, 0), (0, 0)
    return (found[0][0], found[-1][0]), (found[0][1], found[-1][1])


def _ranking(
    rng: ChartRange,
    steps: Steps,
    model: ModelInfo | None,
    value: Any,
    teams: dict[int, TeamInfo],
    what: str = "gpus",
) -> list[tuple[float, int]]:
    """(total over the window, team id), largest first.

    From the hourly rows when the window has any (a day of minutes for 200 teams is 288,000
    rows, its hours 4,800), cached under what changes them: the window's first and last
    hourly row (an hour is written once, when it is over) and the teams (deleting one deletes
    its rows); from the minute rows otherwise (the last hour's chart, a new portal).
    """
    hour_keys, hour_ids = steps.hour_keys, steps.hour_ids
    if rng.resolution == "minute":
        hour_keys, hour_ids = _hour_keys_within(steps) if rng.step > 60 else ((0, 0), (0, 0))
    key = ""
    if hour_keys != (0, 0):
        key = (
            f"dashboards:rank:{connection.settings_dict['NAME']}:{what}:"
            f"{model.id if model else '-'}:{hour_keys[0]}:{hour_keys[1]}:{hour_ids[0]}:"
            f"{hour_ids[1]}:"
            f"{len(teams)}:{max(teams, default=0)}"
        )
        cached = cache.get(key)
        if cached is not None:
            return list(cached)
        rows = TEAM_SOURCES[("hour", model is not None)].objects.filter(
            at__gte=utc(hour_keys[0]), at__lte=utc(hour_keys[1])
        )
    else:
        rows = TEAM_SOURCES[("minute", model is not None)].objects.filter(
            at__gt=utc(steps.start), at__lte=utc(steps.end)
        )
    if model is not None:
        rows = rows.filter(gpu_model_id=model.id)
    totals = rows.values("team_id").annotate(total=Sum(value)).order_by()
    ranking = sorted(
        ((float(r["total"] or 0.0), r["team_id"]) for r in totals), key=lambda x: (-x[0], x[1])
    )
    if key:
        cache.set(key, ranking, RANKING_CACHE_SECONDS)
    return ranking


def _team_values(
    rng: ChartRange,
    steps: Steps,
    teams: Iterable[int],
    model: ModelInfo | None,
    value: Any,
    peak: Any | None,
) -> tuple[dict[int, dict[int, float]], dict[int, dict[int, float]]]:
    """Per team, its mean per step (sum over the step's snapshots / their number) and, when
    ``peak`` is given, its highest minute per step."""
    chosen = list(teams)
    means: dict[int, dict[int, float]] = defaultdict(dict)
    peaks: dict[int, dict[int, float]] = defaultdict(dict)
    if not chosen:
        return means, peaks

    def from_minutes(since: dt.datetime) -> None:
        rows = TEAM_SOURCES[("minute", model is not None)].objects.filter(
            at__gt=since, at__lte=utc(steps.end), team_id__in=chosen
        )
        if model is not None:
            rows = rows.filter(gpu_model_id=model.id)
        aggregates: dict[str, Any] = {"s": Sum(value)}
        if peak is not None:
            aggregates["p"] = Max(value)
        for r in (
            rows.annotate(b=EpochBucket("at", step=rng.step))
            .values("team_id", "b")
            .annotate(**aggregates)
            .order_by()
        ):
            runs = steps.runs.get(r["b"])
            if runs:
                means[r["team_id"]][r["b"]] = float(r["s"] or 0) / runs
                if peak is not None:
                    peaks[r["team_id"]][r["b"]] = float(r["p"] or 0)

    if rng.resolution == "minute":
        from_minutes(utc(steps.start))
        return means, peaks
    rows = TEAM_SOURCES[("hour", model is not None)].objects.filter(
        at__gte=utc(steps.hour_keys[0]), at__lte=utc(steps.hour_keys[1]), team_id__in=chosen
    )
    if steps.hour_keys == (0, 0):
        rows = rows.none()
    if model is not None:
        rows = rows.filter(gpu_model_id=model.id)
    fields = ["team_id", "ts", "v"] + (["p"] if peak is not None else [])
    annotations: dict[str, Any] = {"ts": Epoch("at"), "v": value}
    if peak is not None:
        annotations["p"] = peak
    for row in rows.annotate(**annotations).values_list(*fields):
        team_id, ts = row[0], row[1]
        means[team_id][ts] = float(row[2] or 0)
        if peak is not None:
            peaks[team_id][ts] = float(row[3] or 0)
    if steps.hours_end is not None and steps.hours_end.timestamp() <= steps.end:
        from_minutes(tail_since(steps))
    return means, peaks


def _chosen(
    scope: TeamScope,
    teams: dict[int, TeamInfo],
    ranking: Sequence[tuple[float, int]],
    top: int,
) -> list[int]:
    """The ``top`` visible teams with the most, and every own team (dropped later when it
    has no data in the window)."""
    chosen = [t for total, t in ranking if total > 0 and scope.visible(t) and t in teams][:top]
    chosen += [t for t in sorted(scope.own) if t in teams and t not in chosen]
    return chosen


def team_allocation_chart(
    *,
    scope: TeamScope,
    live: LiveState,
    range_key: str | None = None,
    model: ModelInfo | None = None,
    top: int = 8,
) -> Chart:
    """GPUs allocated over time, stacked by team (the pool overview's chart): each team's
    mean per step, "Other teams" for the rest of the pool, and the pool's highest minute per
    step as a line over the stack."""
    rng = chart_range(range_key)
    now = live.now
    title = f"GPUs allocated by team, {rng.label}" + (f" ({model.key})" if model else "")
    chart = Chart(
        "stacked",
        title,
        "GPUs",
        rng.key,
        int((now - rng.span).timestamp()),
        int(now.timestamp()),
        rng.step,
        note=rng.note,
    )
    steps = window_steps(rng, now, model)
    if not steps.runs:
        return chart
    ranking = _ranking(rng, steps, model, F("gpus_allocated"), live.teams)
    chosen = _chosen(scope, live.teams, ranking, top)
    peak_field = F("gpus_allocated_peak") if rng.resolution == "hour" else F("gpus_allocated")
    means, peaks = _team_values(rng, steps, chosen, model, F("gpus_allocated"), peak_field)
    buckets = steps.times()
    series = []
    for team_id in chosen:
        team = live.teams[team_id]
        s = Series(
            scope.label(team),
            [means[team_id].get(b, 0.0) for b in buckets],
            own=team_id in scope.own,
            colour=team_colour(team_id),
            peaks=[peaks[team_id].get(b, 0.0) for b in buckets] if rng.step > 60 else None,
            key=team.slug,
        )
        if s.has_data():
            series.append(s)
    series.sort(key=lambda s: (-sum(v or 0 for v in s.values), s.label))
    rest = [
        max(0.0, steps.pool_mean.get(b, 0.0) - sum(s.values[i] or 0.0 for s in series))
        for i, b in enumerate(buckets)
    ]
    if any(v > 1e-9 for v in rest):
        series.append(Series(OTHER_TEAMS, list(rest), colour=OTHER_COLOUR, key="other"))
    if rng.step > 60:
        chart.lines.append(
            Series(
                PEAK_LABEL,
                [steps.pool_peak.get(b, 0.0) for b in buckets],
                colour=PEAK_COLOUR,
                key="peak",
            )
        )
    columns = [s.values for s in series] + [s.peaks for s in series if s.peaks is not None]
    columns += [line.values for line in chart.lines]
    chart.series = series
    chart.times = with_gaps([steps.x(b) for b in buckets], rng.step, columns)
    chart.as_of = buckets[-1] + (rng.step - 60 if rng.resolution == "minute" else 0)
    return chart


def share_history_chart(
    *,
    scope: TeamScope,
    live: LiveState,
    range_key: str | None = None,
    top: int = 8,
) -> Chart:
    """Each team's dominant share (allocation + usage weight x decayed usage) over time, in
    percent: the mean per step, and a last point at ``now`` with the live figures the
    fair-share table shows, so the chart ends where the table is. The teams are those with
    the most over the window, then those with a share only now, and the viewer's own."""
    rng = chart_range(range_key, default="7d")
    now = live.now
    chart = Chart(
        "lines",
        f"Dominant share by team, {rng.label}",
        "%",
        rng.key,
        int((now - rng.span).timestamp()),
        int(now.timestamp()),
        rng.step,
        note=f"{rng.note.split(';')[0]}; the last point is now",
    )
    standings: dict[int, TeamStanding] = live.standings
    steps = window_steps(rng, now)
    usage_weight = engine_config().usage_weight
    value = models.ExpressionWrapper(
        (F("allocation_share") + F("usage_share") * usage_weight) * 100.0,
        output_field=FloatField(),
    )
    ranking = (
        [r for r in _ranking(rng, steps, None, value, live.teams, f"share{usage_weight}") if r[0]]
        if steps.runs
        else []
    )
    ranked = {t for _, t in ranking}
    ranking += sorted(
        ((s.dominant_share, t) for t, s in standings.items() if t not in ranked),
        key=lambda x: (-x[0], x[1]),
    )
    chosen = _chosen(scope, live.teams, ranking, top)
    means, _ = (
        _team_values(rng, steps, chosen, None, value, None)
        if steps.runs
        else (defaultdict(dict), {})
    )
    buckets = steps.times()
    now_ts = int(now.timestamp())
    columns = {t: [means[t].get(b, 0.0) for b in buckets] for t in chosen}
    x = with_gaps([steps.x(b) for b in buckets], rng.step, list(columns.values()))
    if x and x[-1] >= now_ts:  # the live point replaces a step starting this very second
        x.pop()
        for values in columns.values():
            values.pop()
    x.append(now_ts)
    series = []
    for team_id in chosen:
        team = live.teams[team_id]
        current = standings[team_id].dominant_share if team_id in standings else 0.0
        s = Series(
            scope.label(team),
            [*columns[team_id], current * 100],
            own=team_id in scope.own,
            colour=team_colour(team_id),
            key=team.slug,
        )
        if s.has_data():
            series.append(s)
    series.sort(key=lambda s: (-s.latest, s.label))
    chart.series = series
    chart.times = x
    chart.as_of = now_ts
    return chart


# ---------------------------------------------------------------------------------------------
# Usage per day or month
# ---------------------------------------------------------------------------------------------
def usage_chart(
    rows: Sequence[Any],
    *,
    period: Literal["day", "month"],
    rng_label: str,
    since: dt.datetime,
    until: dt.datetime,
) -> Chart:
    """GPU-hours per period stacked by model, over ``[since, until]``."""
    periods = sorted({r.period for r in rows})
    index = {p: i for i, p in enumerate(periods)}
    per_model: dict[str, list[Value]] = {}
    for r in rows:
        values = per_model.setdefault(r.model, [0.0] * len(periods))
        values[index[r.period]] = (values[index[r.period]] or 0.0) + r.gpu_hours
    series = sorted(
        (Series(m, v, colour=key_colour(m), key=m) for m, v in per_model.items()),
        key=lambda s: (-sum(v or 0 for v in s.values), s.label),
    )
    times = [int(dt.datetime.combine(p, dt.time(), tzinfo=dt.UTC).timestamp()) for p in periods]
    step = 86400 if period == "day" else 31 * 86400
    return Chart(
        "stacked",
        f"GPU-hours per {period} by model, {rng_label}",
        "GPU-hours",
        period,
        int(since.timestamp()),
        int(until.timestamp()),
        step,
        times,
        series,
        note=f"one point per UTC {period}",
    )
