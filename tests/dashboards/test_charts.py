"""Time charts tell the truth about time: the window is the axis, a point is its step's mean
(and the pool's highest minute), a missing stretch is a gap, a team keeps its colour, and the
viewer's own teams are never folded into "Other teams"."""

from __future__ import annotations

import datetime as dt

import pytest

from dashboards import charts
from dashboards.colours import OTHER_COLOUR, team_colour
from dashboards.live import LiveState
from dashboards.selectors.scope import OTHER_TEAMS, team_scope
from scheduling.models import GpuModel, UsageRecord
from tests.dashboards.history import seed_history, seed_minute
from tests.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2025, 3, 4, 10, 30, 15, tzinfo=dt.UTC)


@pytest.fixture
def a100(catalog):
    return GpuModel.objects.get(key="a100-80gb")


@pytest.fixture
def east(kubesim_cluster):
    return kubesim_cluster("east")


def _minutes(start: dt.datetime, end: dt.datetime):
    at = start
    while at <= end:
        yield at
        at += dt.timedelta(minutes=1)


def _chart(user, range_key: str, **kwargs) -> charts.Chart:
    return charts.team_allocation_chart(
        scope=team_scope(user=user), live=LiveState(now=NOW), range_key=range_key, **kwargs
    )


def _series(chart: charts.Chart) -> dict[str, charts.Series]:
    return {s.label: s for s in [*chart.series, *chart.lines]}


def test_a_burst_between_two_10_minute_marks_shows_in_the_24h_chart(
    bob, vision, language, east, a100
):
    """Language holds 14 GPUs from 09:13 to 09:15 only: the 10-minute samples at 09:10 and
    09:20 never saw it; the step's mean and its highest minute do."""
    for at in _minutes(NOW.replace(hour=8, minute=0), NOW):
        burst = dt.time(9, 13) <= at.time() <= dt.time(9, 15, 59)
        teams = {vision.pk: 2, language.pk: 14 if burst else 0}
        seed_minute(at, teams, cluster_id=east.pk, model_id=a100.pk, capacity=20)
    chart = _chart(bob, "24h")
    step = NOW.replace(hour=9, minute=10, second=0)
    i = chart.times.index(int(step.timestamp()))
    series = _series(chart)
    language_series = series["Language"]
    assert language_series.values[i] == pytest.approx(14 * 3 / 10)  # the step's mean
    assert language_series.peaks[i] == 14  # its highest minute
    assert series[charts.PEAK_LABEL].values[i] == 16  # the pool's highest minute
    assert series["Vision"].values[i] == pytest.approx(2)
    assert language_series.peak == 14  # the table's "Peak" column
    assert language_series.values[i - 1] == 0 and language_series.values[i + 1] == 0


def test_the_axis_is_the_window_even_with_one_point(bob, vision, east, a100):
    seed_minute(NOW, {vision.pk: 3}, cluster_id=east.pk, model_id=a100.pk, capacity=20)
    for key, span in (("7d", dt.timedelta(days=7)), ("24h", dt.timedelta(hours=24))):
        chart = _chart(bob, key)
        assert (chart.start, chart.end) == (int((NOW - span).timestamp()), int(NOW.timestamp()))
        assert len(chart.times) == 1 and chart.series[0].values == [3]
        data = chart.as_json()
        assert (data["from"], data["to"]) == (chart.start, chart.end)


def test_a_stretch_without_snapshots_is_a_gap_not_a_line(bob, vision, east, a100):
    for at in [*_minutes(NOW - dt.timedelta(hours=5), NOW - dt.timedelta(hours=4)),
               *_minutes(NOW - dt.timedelta(hours=1), NOW)]:  # fmt: skip
        seed_minute(at, {vision.pk: 4}, cluster_id=east.pk, model_id=a100.pk, capacity=20)
    chart = _chart(bob, "24h")
    values = _series(chart)["Vision"].values
    gaps = [i for i, v in enumerate(values) if v is None]
    assert len(gaps) == 1  # one break between the two stretches
    before, after = chart.times[gaps[0] - 1], chart.times[gaps[0] + 1]
    assert after - before >= 3 * 3600
    assert chart.times == sorted(chart.times)


def test_the_7d_chart_adds_the_hour_not_downsampled_yet(bob, vision, east, a100):
    seed_history(
        teams=[(vision.pk, 8)],
        cluster_id=east.pk,
        model_id=a100.pk,
        capacity=20,
        hours=24,
        now=NOW,
    )
    for at in _minutes(NOW.replace(minute=0), NOW):
        seed_minute(at, {vision.pk: 5}, cluster_id=east.pk, model_id=a100.pk, capacity=20)
    chart = _chart(bob, "7d")
    current_hour = int(NOW.replace(minute=0, second=0).timestamp())
    assert chart.times[-1] == current_hour and len(chart.times) == 25
    assert _series(chart)["Vision"].values[-1] == pytest.approx(5)


def test_the_viewers_own_team_is_never_folded_into_other_teams(bob, vision, east, a100):
    big = [TeamFactory(name=f"Big {i}") for i in range(9)]
    for at in _minutes(NOW - dt.timedelta(minutes=30), NOW):
        teams = {t.pk: 10 + i for i, t in enumerate(big)}
        if at.minute == 20:  # Vision holds one GPU for a single minute
            teams[vision.pk] = 1
        seed_minute(at, teams, cluster_id=east.pk, model_id=a100.pk, capacity=200)
    chart = _chart(bob, "1h", top=3)
    labels = [s.label for s in chart.series]
    assert labels[:3] == ["Big 8", "Big 7", "Big 6"]
    assert "Vision" in labels and labels[-1] == OTHER_TEAMS
    vision_series = _series(chart)["Vision"]
    assert vision_series.own and sum(v or 0 for v in vision_series.values) == 1
    other = _series(chart)[OTHER_TEAMS]
    assert other.colour == OTHER_COLOUR
    assert other.values[-1] == sum(10 + i for i in range(6))  # Big 0 to Big 5


def test_a_team_without_data_in_the_window_is_not_drawn(bob, vision, language, east, a100):
    seed_minute(NOW, {language.pk: 4}, cluster_id=east.pk, model_id=a100.pk, capacity=20)
    chart = _chart(bob, "1h")
    assert [s.label for s in chart.series] == ["Language"]


def test_a_team_keeps_its_colour_whatever_its_rank_page_or_range(
    bob, charlie, vision, language, east, a100
):
    seed_history(
        teams=[(vision.pk, 8), (language.pk, 4)],
        cluster_id=east.pk,
        model_id=a100.pk,
        capacity=20,
        minutes=60,
        hours=48,
        now=NOW,
    )
    colours = set()
    for user in (bob, charlie):
        for key in ("1h", "24h", "7d"):
            chart = _chart(user, key)
            colours.add(tuple((s.label, s.colour) for s in chart.series))
        share = charts.share_history_chart(
            scope=team_scope(user=user), live=LiveState(now=NOW), range_key="24h"
        )
        colours.add(tuple(sorted((s.label, s.colour) for s in share.series)))
    by_team = {label: colour for entry in colours for label, colour in entry}
    assert by_team == {"Vision": team_colour(vision.pk), "Language": team_colour(language.pk)}
    assert team_colour(vision.pk) != team_colour(language.pk)


def test_the_fair_share_chart_ends_at_the_tables_figures_and_shows_decayed_usage(
    client, scenario, charlie, vision, language
):
    """Robotics runs nothing now but used GPUs yesterday: its dominant share is that usage,
    decaying, on the table's bar and on the chart; the chart's last point is each team's
    figure in the table."""
    robotics = TeamFactory(name="Robotics", slug="robotics")
    a100 = GpuModel.objects.get(key="a100-80gb")
    live = LiveState()
    yesterday = (live.now - dt.timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    UsageRecord.objects.create(
        team=robotics,
        user=UserFactory(),
        gpu_model=a100,
        hour=yesterday,
        gpu_hours=400,
        weighted_gpu_hours=400,
    )
    for at in _minutes(live.now - dt.timedelta(minutes=20), live.now):
        seed_minute(
            at,
            {vision.pk: 12},
            cluster_id=scenario.pk,
            model_id=a100.pk,
            capacity=20,
            shares={vision.pk: (0.6, 0.0), robotics.pk: (0.0, 0.01)},
        )
    client.force_login(charlie)
    page = client.get("/fair-share/?range=1h").content.decode()
    standing = live.standings[robotics.pk]
    assert standing.usage_share > 0 and standing.allocation_share == 0
    row = page[page.index('data-team="robotics"') :]
    row = row[: row.index("</tr>")]
    assert "no work; past usage still counts" in row
    assert f"{100 * standing.dominant_share:.1f} % = 0.0 % now + " in row
    share = charts.share_history_chart(scope=team_scope(user=charlie), live=live, range_key="1h")
    last = {s.key: s.values[-1] for s in share.series}
    assert share.times[-1] == int(live.now.timestamp())
    for team in (vision, language, robotics):
        expected = 100 * live.standings[team.pk].dominant_share
        assert last.get(team.slug, 0.0) == pytest.approx(expected), team.slug
    assert last["robotics"] > 0
    robotics_series = next(s for s in share.series if s.key == "robotics")
    assert robotics_series.values[-2] == pytest.approx(1.0)  # the snapshots: usage share 1 %
