"""The dashboards' REST endpoints: figures, parameters, errors, team scoping and the schema."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from dashboards.models import PoolMinute, SnapshotRun
from dashboards.snapshots import minute_floor, snapshot_take
from scheduling.models import GpuModel, UsageRecord

pytestmark = pytest.mark.django_db


def test_pool_now_per_cluster_and_model(api_as, scenario, bob):
    body = api_as(bob).get("/api/v1/pool/").json()
    cells = {(c["cluster"], c["model"]): c for c in body["cells"]}
    a100 = cells[("east", "a100-80gb")]
    assert (a100["gpus_allocatable"], a100["gpus_allocated"], a100["gpus_free"]) == (20, 12, 7)
    assert a100["gpus_fragmented"] == 7 and a100["largest_free_block"] == 4
    models = {m["model"]: m for m in body["models"]}
    assert models["v100-32gb"]["pending_gpus"] == 8 and models["v100-32gb"]["clusters"] == ["east"]
    assert (body["queued_jobs"], body["pending_gpus"]) == (2, 9)


def _history_rows(cluster, minutes: int, now: dt.datetime) -> None:
    """``minutes`` minute snapshots of A100s allocating 0, 1, 2, … GPUs, ending at ``now``."""
    a100 = GpuModel.objects.get(key="a100-80gb")
    t4 = GpuModel.objects.get(key="t4")
    for i in range(minutes):
        at = minute_floor(now) - dt.timedelta(minutes=minutes - 1 - i)
        SnapshotRun.objects.create(at=at, taken_at=at)
        PoolMinute.objects.create(
            at=at, cluster=cluster, gpu_model=a100, gpus_allocatable=16, gpus_allocated=i
        )
        PoolMinute.objects.create(
            at=at, cluster=cluster, gpu_model=t4, gpus_allocatable=4, gpus_allocated=1
        )


def test_pool_history_sums_series_and_averages_steps(api_as, bob, pool):
    east = pool("east", "a100-80gb", nodes=1, gpus=8)
    now = timezone.now()
    _history_rows(east, 20, now)
    client = api_as(bob)
    body = client.get("/api/v1/pool/history/?since=1h&step=1m").json()
    assert body["resolution"] == "minute" and body["step"] == 60
    assert [p["gpus_allocated"] for p in body["points"]] == [i + 1 for i in range(20)]
    assert body["points"][0]["gpus_allocatable"] == 20  # both models summed
    one = client.get("/api/v1/pool/history/?since=1h&step=1m&model=a100-80gb&cluster=east").json()
    assert one["points"][-1]["gpus_allocated"] == 19
    coarse = client.get("/api/v1/pool/history/?since=1h&step=10m&model=t4").json()
    assert {p["gpus_allocated"] for p in coarse["points"]} == {1.0}
    assert sum(1 for _ in coarse["points"]) in (2, 3)  # 20 minutes in 10-minute steps


def test_pool_history_uses_hourly_rows_for_long_windows(api_as, bob, pool):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    body = api_as(bob).get("/api/v1/pool/history/?since=7d").json()
    assert body["resolution"] == "hour" and body["step"] == 3600 and body["points"] == []


@pytest.mark.parametrize(
    "query, field",
    [
        ("since=yesterday", "since"),
        ("step=fast", "step"),
        ("step=0", "step"),
        ("model=no-such-gpu", "model"),
        ("cluster=nowhere", "cluster"),
        ("since=2025-01-02T00:00:00Z&until=2025-01-01T00:00:00Z", "until"),
    ],
    ids=["bad since", "bad step", "zero step", "unknown model", "unknown cluster", "until first"],
)
def test_pool_history_explains_bad_parameters(api_as, bob, catalog, query, field):
    response = api_as(bob).get(f"/api/v1/pool/history/?{query}")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]


def test_team_usage_is_for_members_only(api_as, bob, charlie, root, vision, catalog):
    t4 = GpuModel.objects.get(key="t4")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=2)
    UsageRecord.objects.create(
        team=vision, user=bob, gpu_model=t4, hour=hour, gpu_hours=3, weighted_gpu_hours=0.81
    )
    body = api_as(bob).get("/api/v1/teams/vision/usage/").json()
    assert body["team"] == "vision" and body["period"] == "day"
    assert [(r["user"], r["model"], r["gpu_hours"]) for r in body["rows"]] == [("bob", "t4", 3.0)]
    assert body["rows"][0]["cost"] == f"{t4.price_per_hour_usd * 3:.2f}"
    assert api_as(charlie).get("/api/v1/teams/vision/usage/").status_code == 404
    assert api_as(charlie).get("/api/v1/teams/nope/usage/").status_code == 404
    assert api_as(root).get("/api/v1/teams/vision/usage/?period=month").status_code == 200
    bad = api_as(bob).get("/api/v1/teams/vision/usage/?period=week")
    assert bad.status_code == 400


def test_queue_stats_show_every_model_and_only_visible_teams(api_as, scenario, charlie, settings):
    body = api_as(charlie).get("/api/v1/queue/stats/?window=24h").json()
    assert body["window_hours"] == 24
    models = {m["model"]: m for m in body["models"]}
    assert models["v100-32gb"]["queued_jobs"] == 1 and models["t4"]["pending_gpus"] == 1
    assert {t["team"] for t in body["teams"]} == {"language", "vision"}  # aggregates are public
    settings.GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS = False
    body = api_as(charlie).get("/api/v1/queue/stats/").json()
    assert {t["team"] for t in body["teams"]} == {"language"}
    assert {m["model"] for m in body["models"]} >= {"v100-32gb", "t4"}  # pool-wide stays


def test_fair_share_standings(api_as, scenario, charlie):
    teams = {t["team"]: t for t in api_as(charlie).get("/api/v1/fair-share/").json()["teams"]}
    assert teams["vision"]["allocation_share"] == pytest.approx(0.6)
    assert teams["vision"]["dominant_model"] == "a100-80gb"
    assert teams["vision"]["borrowed_gpus"] == 4
    assert teams["language"]["target_share"] == pytest.approx(0.5)
    # Language only queues: equal treatment splits the active teams' 60 % by weight
    assert teams["vision"]["fair_level"] == pytest.approx(0.3)
    assert teams["language"]["fair_level"] == pytest.approx(0.3)
    assert teams["vision"]["status"] == "above fair level"
    assert teams["language"]["status"] == "below fair level"


def test_the_endpoints_need_a_login(client, catalog):
    for url in ("pool/", "pool/history/", "teams/vision/usage/", "queue/stats/", "fair-share/"):
        assert client.get(f"/api/v1/{url}").status_code in (401, 403), url


def test_the_schema_documents_the_dashboard_endpoints(client):
    schema = client.get("/api/schema/?format=json").json()
    for path in (
        "/api/v1/pool/",
        "/api/v1/pool/history/",
        "/api/v1/teams/{slug}/usage/",
        "/api/v1/queue/stats/",
        "/api/v1/fair-share/",
    ):
        assert path in schema["paths"], path
    params = {p["name"] for p in schema["paths"]["/api/v1/pool/history/"]["get"]["parameters"]}
    assert {"model", "cluster", "since", "until", "step"} <= params


def test_snapshots_feed_history_end_to_end(api_as, scenario, bob):
    snapshot_take()
    body = api_as(bob).get("/api/v1/pool/history/?since=10m&model=a100-80gb").json()
    assert body["points"][-1]["gpus_allocated"] == 12
