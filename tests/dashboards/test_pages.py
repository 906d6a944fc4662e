"""The dashboard pages as a user reads them: figures with units, marks in words, empty states
that explain themselves, and another team's jobs never shown."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.utils import timezone

from dashboards.snapshots import snapshot_take
from portal.jobs.services import job_submit
from scheduling.models import GpuModel, UsageRecord
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def test_the_home_page_is_the_pool_overview_with_a_card_per_model(client, scenario, bob):
    snapshot_take()
    client.force_login(bob)
    page = client.get("/").content.decode()
    assert "GPU pool" in page
    assert 'id="model-a100-80gb"' in page and 'id="model-v100-32gb"' in page
    assert "12</strong> of 20 GPUs allocated (60 %)" in page
    assert "largest block 4 on one node" in page
    assert "8 GPUs <small>(1 queued job)" in page  # V100 demand
    assert "east <small>(20)</small>" in page  # the clusters a model lives on
    assert 'hx-trigger="every 15s"' in page
    assert 'id="usage-chart-data"' in page and "vendor/uplot/uPlot.iife.min.js" in page


def test_the_live_fragment_and_the_chart_fragment_swap_alone(client, scenario, bob):
    snapshot_take()
    client.force_login(bob)
    live = client.get("/?fragment=live", HTTP_HX_REQUEST="true").content.decode()
    assert live.startswith('<section id="pool-live"') and "<html" not in live
    chart = client.get("/?fragment=chart&range=1h", HTTP_HX_REQUEST="true").content.decode()
    assert chart.lstrip().startswith('<section id="pool-chart"') and "<html" not in chart
    assert 'aria-current="true" class="current">1h' in chart


def test_an_empty_pool_says_why_and_where_to_fix_it(client, root, bob, catalog):
    client.force_login(bob)
    page = client.get("/").content.decode()
    assert "No clusters registered yet" in page and "A platform admin can add one" in page
    assert "No snapshots in this range yet" in page
    client.force_login(root)
    assert "An admin can add one here" in client.get("/").content.decode()
    assert "No clusters registered yet" in client.get("/pool/clusters/").content.decode()
    assert "No team has quota, jobs or usage yet" in client.get("/fair-share/").content.decode()
    assert "No GPU time for you" in client.get("/usage/").content.decode()


def test_the_cluster_view_marks_cordoned_and_notready_nodes_in_words(client, scenario, bob):
    client.force_login(bob)
    page = client.get("/pool/clusters/").content.decode()
    assert "v100-1: 0 of 4 GPUs used" in page and "cordoned" in page
    assert '<span class="node-flag">NotReady</span>' in page
    assert "a100-0: 8 of 8 GPUs used (8 by portal jobs, 0 by other pods), 0 free" in page
    assert '<span data-figure="fragmented">7 fragmented</span>' in page
    assert "Idle allocations" not in page  # an admin's section


def test_fair_share_shows_every_team_standing_but_no_job(client, scenario, charlie):
    client.force_login(charlie)  # Language: sees Vision's totals, never its jobs
    page = client.get("/fair-share/").content.decode()
    assert "Vision" in page and "Language" in page
    # Vision holds 12 of 20 A100s; Language only queues: equal treatment would split the
    # 60 % the active teams hold by weight, 30 % each
    assert "60.0 % = 60.0 % now (a100-80gb) + 0.0 % past usage · fair level 30.0 %" in page
    assert "above fair level" in page and "below fair level" in page
    assert "big" not in page and "pair" not in page  # job names stay with their team


def test_fair_share_can_keep_other_teams_private(client, scenario, charlie, settings):
    settings.GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS = False
    client.force_login(charlie)
    page = client.get("/fair-share/").content.decode()
    assert "Vision" not in page and "Language" in page
    assert "1 other team not shown" in page


def test_the_queue_page_adds_wait_percentiles_per_model(client, scenario, bob):
    client.force_login(bob)
    page = client.get("/queue/").content.decode()
    assert "Waiting per model" in page
    assert '<tr data-model="v100-32gb">' in page and '<tr data-model="t4">' in page
    assert 'class="mine"' in page  # the existing page's "yours" highlight is kept


def test_my_usage_shows_gpu_hours_and_cost_per_day_and_downloads_csv(client, bob, vision, catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    t4 = GpuModel.objects.get(key="t4")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
    UsageRecord.objects.create(
        team=vision, user=bob, gpu_model=a100, hour=hour, gpu_hours=8, weighted_gpu_hours=8
    )
    UsageRecord.objects.create(
        team=vision, user=bob, gpu_model=t4, hour=hour, gpu_hours=2, weighted_gpu_hours=0.54
    )
    client.force_login(bob)
    page = client.get("/usage/").content.decode()
    assert "10.0 h" in page  # 8 + 2 GPU-hours
    price = a100.price_per_hour_usd * 8 + t4.price_per_hour_usd * 2
    assert f"{price:.2f} USD" in page
    response = client.get("/usage/export.csv?scope=vision&period=month")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == [
        "month",
        "team",
        "user",
        "model",
        "gpu_hours",
        "weighted_gpu_hours",
        "cost_usd",
    ]
    assert {(r[1], r[2], r[3], r[4]) for r in rows[1:]} == {
        ("vision", "bob", "a100-80gb", "8.0000"),
        ("vision", "bob", "t4", "2.0000"),
    }


def test_a_chargeback_rate_prices_weighted_hours(client, bob, vision, catalog, settings):
    settings.GPUPOOL_PRICE_PER_GPU_HOUR = 2.5
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=3)
    UsageRecord.objects.create(
        team=vision,
        user=bob,
        gpu_model=GpuModel.objects.get(key="t4"),
        hour=hour,
        gpu_hours=10,
        weighted_gpu_hours=2.7,
    )
    client.force_login(bob)
    assert "6.75 USD" in client.get("/usage/").content.decode()


def test_usage_of_a_team_that_is_not_mine_is_a_404(client, charlie, vision, catalog):
    client.force_login(charlie)
    assert client.get("/usage/?scope=vision").status_code == 404
    assert client.get("/usage/export.csv?scope=vision").status_code == 404


def test_csv_cells_cannot_become_formulas(client, vision, catalog):
    from dashboards.views import csv_cell

    assert csv_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert csv_cell("-2+3") == "'-2+3" and csv_cell("bob") == "bob"


def test_pages_need_a_login(client):
    for url in ("/", "/pool/clusters/", "/fair-share/", "/usage/", "/usage/export.csv"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url


def test_a_job_page_without_prometheus_has_no_utilization_card(client, bob, vision, catalog):
    job = job_submit(user=bob, data=job_body()).job
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "GPU utilization" not in page
