"""Charts tell the truth about time, in Chromium: the axis is the window whatever data exists,
ticks read in 24-hour UTC with ISO dates, a burst between two 10-minute marks shows in the
24 h chart, and a team has one colour on every page and every load."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
from django.utils import timezone

from dashboards.live import LiveState
from scheduling.models import GpuModel
from tests.browser.conftest import log_in, wait_until
from tests.dashboards.history import seed_history, seed_minute

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
HOUR = re.compile(r"^([01]\d|2[0-3]):[0-5]\d(\n\d{4}-\d{2}-\d{2})?$")

CHART = """id => {
  const c = window.gpupoolCharts[id];
  const legend = {};
  document.querySelectorAll('#' + id + ' .u-legend .u-series').forEach(row => {
    const label = row.querySelector('.u-label');
    const marker = row.querySelector('.u-marker');
    if (label && marker) legend[label.innerText] = getComputedStyle(marker).borderColor;
  });
  return {range: c.xRange(), from: c.data.from, to: c.data.to, x: c.data.x,
          ticks: c.axis.ticks, series: c.data.series, lines: c.data.lines, legend};
}"""


def _chart(p, figure: str) -> dict:
    p.wait_for_selector(f"#{figure}[data-drawn]")
    return p.evaluate(CHART, figure)


def _a100() -> GpuModel:
    return GpuModel.objects.get(key="a100-80gb")


def test_a_7_day_chart_with_a_single_point_shows_the_7_days(
    page, live_server, scenario, bob, vision
):
    seed_minute(timezone.now(), {vision.pk: 3}, cluster_id=scenario.pk,
                model_id=_a100().pk, capacity=20)  # fmt: skip
    p = page.page
    log_in(p, live_server, "bob", next_url="/?range=7d")
    chart = _chart(p, "usage-chart")
    now = time.time()
    assert len(chart["x"]) == 1
    low, high = chart["range"]
    assert (low, high) == (chart["from"], chart["to"])
    assert high - low == 7 * 86400
    assert abs(high - now) < 120  # ends now, not months or years ahead
    assert all(DAY.match(t) for t in chart["ticks"]), chart["ticks"]
    assert 5 <= len(chart["ticks"]) <= 8
    days = [dt.date.fromisoformat(t) for t in chart["ticks"]]
    assert days == sorted(days) and days[-1] <= dt.datetime.now(tz=dt.UTC).date()
    assert days[0] >= (dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=7)).date()

    p.locator("nav.ranges a", has_text="24h").first.click()
    wait_until(p, "window.gpupoolCharts['usage-chart']?.data.range === '24h'")
    chart = _chart(p, "usage-chart")
    low, high = chart["range"]
    assert high - low == 86400 and abs(high - time.time()) < 120
    assert all(HOUR.match(t) for t in chart["ticks"]), chart["ticks"]  # 24-hour UTC
    assert any("\n" in t for t in chart["ticks"])  # the date under the first tick
    assert page.console_errors == [] and page.foreign_requests() == []


def test_a_burst_between_two_10_minute_marks_shows_in_the_24h_series(
    page, live_server, scenario, bob, vision, language
):
    """Language holds 14 GPUs for three minutes between two 10-minute marks, Vision 2 all
    along: the 24 h chart's step is their mean, its peak line and legend the 14."""
    now = timezone.now().replace(second=0, microsecond=0)
    mark = now - dt.timedelta(hours=1)
    mark = mark.replace(minute=mark.minute // 10 * 10)
    a100 = _a100()
    for k in range(180):
        at = now - dt.timedelta(minutes=179 - k)
        burst = mark + dt.timedelta(minutes=3) <= at <= mark + dt.timedelta(minutes=5)
        seed_minute(at, {vision.pk: 2, language.pk: 14 if burst else 0},
                    cluster_id=scenario.pk, model_id=a100.pk, capacity=20)  # fmt: skip
    p = page.page
    log_in(p, live_server, "bob", next_url="/")
    chart = _chart(p, "usage-chart")
    i = chart["x"].index(int(mark.timestamp()))
    language_series = next(s for s in chart["series"] if s["label"] == "Language")
    assert language_series["values"][i] == pytest.approx(4.2)  # 14 x 3 min / 10 min
    assert language_series["peaks"][i] == 14
    assert chart["lines"][0]["values"][i] == 16  # the pool's highest minute in that step
    assert language_series["values"][i - 1] == 0 == language_series["values"][i + 1]
    # hover the step: the legend reads the mean and the peak
    p.evaluate(
        """([id, x]) => { const u = window.gpupoolCharts[id].plot;
                          u.setCursor({left: u.valToPos(x, 'x'), top: 20}); }""",
        ["usage-chart", chart["x"][i]],
    )
    legend = p.inner_text("#usage-chart .u-legend")
    assert "4.2 GPUs (peak 14)" in legend
    assert re.search(r"Highest minute, all teams:?\s*16 GPUs", legend)
    p.click("#usage-chart details summary")
    row = p.locator("#usage-chart tr[data-series=language]")
    assert row.locator("td").nth(1).inner_text() == "14.0 GPUs"  # the peak column
    assert page.console_errors == []


def _share_figures(p) -> dict[str, float]:
    """The fair-share table's dominant share per team, in percent."""
    return {
        row.get_attribute("data-team"): float(
            row.locator("[data-figure=dominant]").inner_text().split(" %")[0]
        )
        for row in p.locator("#fair-share-table tbody tr").all()
    }


def _swatches(p) -> dict[str, str]:
    return p.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#fair-share-table tbody tr')]
             .map(r => [r.dataset.team, getComputedStyle(r.querySelector('.swatch rect')).fill]))"""
    )


def test_a_team_keeps_one_colour_on_every_page_and_load_and_the_share_chart_ends_at_the_table(
    page, browser, live_server, scenario, bob, charlie, vision, language
):
    seed_history(
        teams=[(vision.pk, 8), (language.pk, 4)],
        cluster_id=scenario.pk,
        model_id=_a100().pk,
        capacity=20,
        minutes=60,
        hours=24,
    )
    p = page.page
    log_in(p, live_server, "bob", next_url="/")
    seen: list[dict[str, str]] = []
    pages = (("/", "usage-chart"), ("/?range=1h", "usage-chart"),
             ("/fair-share/", "share-history"), ("/fair-share/", "share-history"))  # fmt: skip
    for url, figure in pages:
        p.goto(f"{live_server.url}{url}")
        chart = _chart(p, figure)
        seen.append({k.removesuffix(" (yours)"): v for k, v in chart["legend"].items()})
    swatches = _swatches(p)
    other = browser.new_context(viewport={"width": 1280, "height": 900})
    charlie_page = other.new_page()
    log_in(charlie_page, live_server, "charlie", next_url="/fair-share/")
    seen.append(
        {
            k.removesuffix(" (yours)"): v
            for k, v in _chart(charlie_page, "share-history")["legend"].items()
        }
    )
    other.close()
    vision_colours = {s["Vision"] for s in seen}
    language_colours = {s["Language"] for s in seen}
    assert len(vision_colours) == 1 and len(language_colours) == 1
    assert vision_colours != language_colours
    assert swatches == {"vision": vision_colours.pop(), "language": language_colours.pop()}

    # the share chart's last point is now, and it is the table's figure
    chart = _chart(p, "share-history")
    assert abs(chart["x"][-1] - time.time()) < 120
    figures = _share_figures(p)
    last = {s["key"]: s["values"][-1] for s in chart["series"]}
    live = LiveState()
    for slug, shown in figures.items():
        assert last[slug] == pytest.approx(shown, abs=0.05), slug
        team = vision if slug == "vision" else language
        assert shown == pytest.approx(100 * live.standings[team.pk].dominant_share, abs=0.05)
    assert page.console_errors == []
