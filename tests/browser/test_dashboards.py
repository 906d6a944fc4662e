"""The dashboards in headless Chromium: charts drawn with the snapshot data, the overview
refreshing itself, the queue's reasons, keyboard and phone widths, and no request leaving
localhost. Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the docs' pictures."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.db.models import F
from django.utils import timezone
from playwright.sync_api import expect

from clusters.models import Cluster
from dashboards.live import LiveState
from dashboards.models import JobUtilization, MetricsSource, QueueWait, TeamHour, TeamMinute
from portal.jobs.services import job_submit
from portal.models import JobState, Membership, Role
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota, TeamPolicy, UsageRecord
from tests.browser.conftest import PageRecorder, log_in, wait_until
from tests.conftest import job_body
from tests.dashboards.conftest import inventory_from_kubesim, place, start
from tests.dashboards.history import seed_history, team_gpus
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WEST = {
    "name": "west",
    "namespaces": ["gpupool"],
    "nodePools": [
        {
            "name": "h100",
            "count": 6,
            "gpuModel": "h100-sxm",
            "gpus": 8,
            "cpu": 224,
            "memory": "2Ti",
        },
        {"name": "l40s", "count": 6, "gpuModel": "l40s", "gpus": 4, "cpu": 64, "memory": "512Gi"},
    ],
}


def _chart(p, figure: str) -> dict:
    p.wait_for_selector(f"#{figure}[data-drawn]")
    return p.evaluate(
        """id => {
          const c = window.gpupoolCharts[id];
          return {labels: c.labels, range: c.data.range, points: c.plot.data[0].length,
                  raw: c.data.series.map(s => s.values), stacked: c.plot.data.slice(1),
                  canvas: !!document.querySelector('#' + id + ' canvas'),
                  legend: document.querySelector('#' + id + ' .u-legend').innerText};
        }""",
        figure,
    )


def _early_in_a_minute(margin_seconds: float = 20.0) -> None:
    """Wait, if need be, for a minute to begin. The history is seeded up to the current
    minute and the page asks for the last hour when it loads: a minute boundary passing in
    between moves the window by one sample, and the chart shows 59 of the 60."""
    import time

    now = timezone.now()
    second = now.second + now.microsecond / 1e6
    if second > 60 - margin_seconds:
        time.sleep(60 - second + 0.2)


def test_the_overview_draws_the_team_chart_from_snapshots(
    page, live_server, scenario, bob, vision, language
):
    a100 = GpuModel.objects.get(key="a100-80gb")
    _early_in_a_minute()
    seed_history(
        teams=[(vision.pk, 8), (language.pk, 4)],
        cluster_id=scenario.pk,
        model_id=a100.pk,
        capacity=20,
        minutes=60,
    )
    p = page.page
    log_in(p, live_server, "bob", next_url="/?range=1h")
    chart = _chart(p, "usage-chart")
    assert chart["canvas"] and chart["range"] == "1h"
    assert chart["labels"] == ["Vision", "Language"]  # most GPUs first
    assert chart["points"] == 60
    assert chart["raw"][0][-3:] == [team_gpus(8, 0, k) for k in (57, 58, 59)]
    assert chart["raw"][1][-1] == team_gpus(4, 1, 59)
    # stacked: the upper band is the sum of both teams
    assert chart["stacked"][1][-1] == chart["raw"][0][-1] + chart["raw"][1][-1]
    assert "Vision (yours)" in chart["legend"] and "Language" in chart["legend"]
    assert p.locator("#usage-chart details summary").inner_text().startswith("Show the figures")
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_the_chart_range_changes_by_keyboard_without_a_reload(
    page, live_server, scenario, bob, vision, language
):
    a100 = GpuModel.objects.get(key="a100-80gb")
    seed_history(
        teams=[(vision.pk, 8), (language.pk, 4)],
        cluster_id=scenario.pk,
        model_id=a100.pk,
        capacity=20,
        minutes=90,
        hours=24 * 7,
    )
    p = page.page
    log_in(p, live_server, "bob", next_url="/")
    assert _chart(p, "usage-chart")["range"] == "24h"
    p.evaluate("window.__marker = 1")
    p.locator("nav.ranges a", has_text="7d").first.focus()
    p.keyboard.press("Enter")
    wait_until(p, "window.gpupoolCharts['usage-chart']?.data.range === '7d'")
    chart = _chart(p, "usage-chart")
    # 168 hourly means and the current hour, not downsampled yet, from its minutes
    assert chart["points"] == 24 * 7 + 1 and chart["labels"] == ["Vision", "Language"]
    assert p.evaluate("window.__marker") == 1
    assert p.url.endswith("/?range=7d")
    assert page.console_errors == []


def test_the_overview_refreshes_a_number_when_a_job_starts(
    page, live_server, scenario, bob, vision, settings
):
    settings.GPUPOOL_DASHBOARD_REFRESH_SECONDS = 1
    job = job_submit(
        user=bob,
        data=job_body(
            name="t4-run",
            replicas=1,
            gpus_per_replica=1,
            gpu_models=["t4"],
            min_gpu_memory_gib=None,
        ),
    ).job
    p = page.page
    log_in(p, live_server, "bob", next_url="/")
    running = p.locator("[data-total=running_jobs]")
    t4_allocated = p.locator("#model-t4 [data-figure=allocated]")
    assert running.inner_text() == "1" and t4_allocated.inner_text() == "0"
    p.evaluate("window.__marker = 1")
    now = timezone.now()
    start(place(job, cluster=scenario, model="t4", nodes=["t4-0"], at=now), at=now)
    expect(p.locator("[data-total=running_jobs]")).to_have_text("2", timeout=10_000)
    assert t4_allocated.inner_text() == "1"
    assert p.evaluate("window.__marker") == 1  # refreshed in place, not reloaded
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_the_queue_page_shows_a_pending_reason_and_waits(page, live_server, scenario, charlie):
    run_cycle()
    p = page.page
    log_in(p, live_server, "charlie", next_url="/queue/")
    reason = p.locator("#queue-table tr.mine .reason-cell").first
    # Language's 2 x 4 on V100 is twice its nominal 4, and no team of the cohort has any to lend.
    # One plain sentence; the scheduler's code stays in the tooltip (and the API).
    lead = reason.locator(".blocker-lead")
    assert lead.get_attribute("data-code") == "COHORT_HAS_NOTHING_TO_LEND"
    assert "COHORT_HAS_NOTHING_TO_LEND" in (lead.get_attribute("title") or "")
    text = reason.inner_text()
    assert "needs 2 replicas × 4 v100-32gb" in text and "team uses 0 of 4 nominal" in text
    assert p.locator("#wait-table tr[data-model=v100-32gb]").count() == 1
    assert page.console_errors == []
    assert page.foreign_requests() == []


@pytest.fixture
def demo_pool(scenario, alice, bob, charlie, vision, language, root):
    """The scenario plus a second cluster, a third team, history, usage, waits and DCGM
    readings: what the docs' screenshots show."""
    robotics = TeamFactory(name="Robotics", slug="robotics")
    dana = UserFactory(username="dana")
    Membership.objects.create(user=dana, team=robotics, role=Role.MEMBER)
    TeamPolicy.objects.create(team=vision, weight=2)
    west = Cluster.objects.create(
        name="west", api_url="https://west.k8s.test", prometheus_url="http://127.0.0.1:9"
    )
    inventory_from_kubesim(west, WEST)
    scenario.prometheus_url = "http://127.0.0.1:9"
    scenario.save(update_fields=["prometheus_url"])
    models = {m.key: m for m in GpuModel.objects.all()}
    Quota.objects.create(team=robotics, gpu_model=models["h100-sxm"], nominal=16)
    Quota.objects.create(team=language, gpu_model=models["h100-sxm"], nominal=16)
    now = timezone.now()
    earlier = now - dt.timedelta(hours=3)
    for user, team, name, nodes in (
        (dana, robotics, "policy-sweep", ["h100-0", "h100-1"]),
        (charlie, language, "llm-finetune", ["h100-2", "h100-3", "h100-4"]),
    ):
        job = job_submit(
            user=user,
            data=job_body(
                team=team.slug,
                name=name,
                replicas=len(nodes),
                gpus_per_replica=8,
                gpu_models=["h100-sxm"],
                min_gpu_memory_gib=None,
            ),
            now=earlier,
        ).job
        start(place(job, cluster=west, model="h100-sxm", nodes=nodes, at=earlier), at=earlier)
    idle = JobFactory(
        team=vision,
        owner=bob,
        name="notebook-idle",
        state=JobState.RUNNING,
        cluster=west,
        gpu_model=models["l40s"],
        node_plan=["l40s-0"],
        gpus_per_replica=2,
        started_at=earlier,
    )
    JobUtilization.objects.create(
        job=idle,
        cluster=west,
        measured_at=now,
        gpus_reporting=2,
        gpu_util_avg=0.4,
        gpu_util_max=1.0,
        idle=True,
        idle_since=now - dt.timedelta(minutes=95),
    )
    MetricsSource.objects.create(cluster=west, checked_at=now, ok=True, series=80)
    MetricsSource.objects.create(
        cluster=scenario, checked_at=now, ok=False, message="Prometheus did not answer within 3 s"
    )
    for i in range(40):
        QueueWait.objects.create(
            event_id=9_000_000 + i,
            job=idle,
            team=vision,
            gpu_model=models["a100-80gb" if i % 2 else "h100-sxm"],
            gpus=8,
            queued_at=now - dt.timedelta(hours=5),
            started_at=now - dt.timedelta(hours=4),
            wait_seconds=30 + 37 * i,
        )
    for day in range(30):
        hour = (now - dt.timedelta(days=day)).replace(minute=0, second=0, microsecond=0)
        for user, model, hours in ((bob, "a100-80gb", 6 + day % 5), (alice, "t4", 3 + day % 3)):
            m = models[model]
            UsageRecord.objects.create(
                team=vision,
                user=user,
                gpu_model=m,
                hour=hour,
                gpu_hours=hours,
                weighted_gpu_hours=hours * m.cost_factor,
            )
    seed_history(
        teams=[(vision.pk, 9), (language.pk, 14), (robotics.pk, 10)],
        cluster_id=west.pk,
        model_id=models["h100-sxm"].pk,
        capacity=48,
        minutes=24 * 60,
        hours=24 * 30,
    )
    # the share history waves around each team's share now, as a real one would lead up to it
    live = LiveState()
    for team, base in ((vision, 9), (language, 14), (robotics, 10)):
        now_share = live.standings[team.pk].allocation_share
        for series in (TeamMinute, TeamHour):
            series.objects.filter(team=team).update(
                allocation_share=F("gpus_allocated") * now_share / base
            )
    run_cycle()  # reasons and positions for the queue
    return west


PAGES = [
    ("pool-overview", "/"),
    ("clusters", "/pool/clusters/"),
    ("fair-share", "/fair-share/"),
    ("queue", "/queue/"),
    ("my-usage", "/usage/?scope=vision"),
]


def _no_horizontal_scroll(p) -> bool:
    return p.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_every_dashboard_page_at_desktop_and_phone_width(
    page, browser, live_server, demo_pool, tmp_path
):
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})  # the docs' desktop pictures
    log_in(p, live_server, "bob", next_url="/")
    for name, url in PAGES:
        p.goto(f"{live_server.url}{url}")
        p.wait_for_load_state("networkidle")
        if p.locator("figure[data-chart] .chart-canvas").count():
            p.wait_for_selector("figure[data-chart][data-drawn]")
        assert _no_horizontal_scroll(p), name
        p.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    mobile = PageRecorder(phone.new_page())
    log_in(mobile.page, live_server, "bob", next_url="/")
    for name, url in PAGES:
        mobile.page.goto(f"{live_server.url}{url}")
        mobile.page.wait_for_load_state("networkidle")
        assert _no_horizontal_scroll(mobile.page), f"{name} scrolls sideways on a phone"
    mobile.page.goto(f"{live_server.url}/")
    mobile.page.wait_for_selector("#usage-chart[data-drawn]")
    mobile.page.screenshot(path=str(shots / "pool-overview-phone.png"), full_page=True)
    assert mobile.console_errors == [] and mobile.foreign_requests() == []
    phone.close()
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_the_admin_sees_idle_allocations_and_unavailable_metrics(
    page, live_server, demo_pool, tmp_path
):
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "root", next_url="/pool/clusters/")
    assert "notebook-idle" in p.inner_text("#idle-allocations")
    assert "GPU metrics unavailable" in p.inner_text("#cluster-east h2")
    # The scenario cordons v100-1 and takes t4-2 NotReady; nothing else on either cluster is.
    cordoned, notready = p.locator(".node.cordoned"), p.locator(".node.notready")
    assert cordoned.count() == 1 and cordoned.get_attribute("aria-label").startswith("v100-1: ")
    assert notready.count() == 1 and notready.get_attribute("aria-label").startswith("t4-2: ")
    p.screenshot(path=str(shots / "clusters-admin.png"), full_page=True)
    p.goto(f"{live_server.url}/jobs/")
    assert page.console_errors == []
    assert page.foreign_requests() == []
