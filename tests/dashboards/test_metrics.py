"""/metrics: the portal's figures in Prometheus's text format, behind a network and a token."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboards.metrics import TERMINAL_COUNTS_CACHE_KEY, observe_cycle, observe_dispatch
from dashboards.snapshots import snapshot_take

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(autouse=True)
def _no_cached_counts():
    from django.core.cache import cache
    from django.db import connection

    cache.delete(f"{TERMINAL_COUNTS_CACHE_KEY}:{connection.settings_dict['NAME']}")


def test_metrics_report_jobs_pool_and_queue(client, scenario):
    snapshot_take()
    observe_cycle(seconds=0.042)
    admitted = timezone.now() - dt.timedelta(seconds=1.5)
    observe_dispatch(cluster="east", admitted_at=admitted)
    observe_dispatch(cluster="east", admitted_at=None)  # not counted
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    s = _samples(response.content.decode())
    assert s[("gpupool_jobs", (("state", "RUNNING"),))] == 1
    assert s[("gpupool_jobs", (("state", "ADMITTED"),))] == 1
    assert s[("gpupool_jobs", (("state", "QUEUED"),))] == 2
    assert s[("gpupool_jobs", (("state", "SUCCEEDED"),))] == 0
    a100 = (("cluster", "east"), ("model", "a100-80gb"))
    assert s[("gpupool_pool_gpus", (*a100, ("state", "allocated")))] == 12
    assert s[("gpupool_pool_gpus", (*a100, ("state", "free")))] == 7
    assert s[("gpupool_pool_gpus", (*a100, ("state", "used_by_others")))] == 1
    t4 = (("cluster", "east"), ("model", "t4"))
    assert s[("gpupool_pool_gpus", (*t4, ("state", "unavailable")))] == 1
    assert s[("gpupool_queue_jobs", (("model", "v100-32gb"),))] == 1
    assert s[("gpupool_queue_gpus", (("model", "v100-32gb"),))] == 8
    assert s[("gpupool_scheduler_cycle_seconds_count", ())] >= 1
    assert s[("gpupool_dispatch_latency_seconds_count", (("cluster", "east"),))] >= 1
    assert s[("gpupool_snapshot_age_seconds", ())] < 60


def test_metrics_refuse_callers_outside_the_allowed_networks(client, catalog, settings):
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    settings.GPUPOOL_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_metrics_need_the_token_when_one_is_set(client, catalog, settings):
    settings.GPUPOOL_METRICS_TOKEN = "s3cret-scrape-token"
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    right = client.get(
        "/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token"
    )
    assert right.status_code == 200 and b"gpupool_jobs" in right.content


def test_a_malformed_network_setting_fails_at_start_up():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DEBUG"],
        env={"DJANGO_SETTINGS_MODULE": "portal.settings", "GPUPOOL_METRICS_ALLOWED_NETWORKS": "x"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "GPUPOOL_METRICS_ALLOWED_NETWORKS" in result.stderr
