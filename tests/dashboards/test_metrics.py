"""/metrics: the portal's figures in Prometheus's text format, behind a network and a token."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboards.metrics import metrics_cache_forget
from dashboards.snapshots import snapshot_take
from portal.telemetry import observe_cycle, observe_dispatch

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(autouse=True)
def _no_cached_counts():

    metrics_cache_forget()


TOKEN = "s3cret-scrape-token"
BEARER = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}


@pytest.fixture
def token(settings):
    settings.GPUPOOL_METRICS_TOKEN = TOKEN


def test_metrics_report_jobs_pool_and_queue(client, scenario, token):
    snapshot_take()
    cycles, dispatches = (
        ("gpupool_scheduler_cycle_seconds_count", ()),
        ("gpupool_dispatch_latency_seconds_count", (("cluster", "east"),)),
    )
    # The histograms are the process's, so other tests' observations are in them: compare.
    before = _samples(client.get("/metrics", REMOTE_ADDR="127.0.0.1", **BEARER).content.decode())
    observe_cycle(seconds=0.042)
    admitted = timezone.now() - dt.timedelta(seconds=1.5)
    observe_dispatch(cluster="east", admitted_at=admitted)
    observe_dispatch(cluster="east", admitted_at=None)  # not counted
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **BEARER)
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
    assert s[cycles] - before.get(cycles, 0) == 1
    assert s[dispatches] - before.get(dispatches, 0) == 1  # the one with no admission is not
    cycle_sum = ("gpupool_scheduler_cycle_seconds_sum", ())
    assert s[cycle_sum] - before.get(cycle_sum, 0) == pytest.approx(0.042)
    latency = ("gpupool_dispatch_latency_seconds_sum", (("cluster", "east"),))
    assert 1.5 <= s[latency] - before.get(latency, 0) < 60
    assert s[("gpupool_snapshot_age_seconds", ())] < 60


def test_metrics_refuse_callers_outside_the_allowed_networks(client, catalog, settings, token):
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", **BEARER).status_code == 403
    settings.GPUPOOL_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", **BEARER).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", **BEARER).status_code == 403


def test_without_a_token_configured_metrics_answer_nobody_unless_switched_off(
    client, catalog, settings
):
    settings.GPUPOOL_METRICS_TOKEN = ""
    refused = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert refused.status_code == 403
    assert "needs GPUPOOL_METRICS_TOKEN" in refused.content.decode()
    settings.GPUPOOL_METRICS_REQUIRE_TOKEN = False  # an explicit decision of the operator
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403  # network still


def test_behind_a_trusted_proxy_the_forwarded_client_is_judged(client, catalog, settings):
    """A reverse proxy on the same host: every request arrives from 127.0.0.1. Trusted, its
    X-Forwarded-For names the real caller, who is outside the allowed networks."""
    settings.GPUPOOL_METRICS_REQUIRE_TOKEN = False
    settings.GPUPOOL_METRICS_TOKEN = ""
    outside = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}
    assert client.get("/metrics", **outside).status_code == 200  # proxy not configured: peer
    settings.GPUPOOL_TRUSTED_PROXIES = ["127.0.0.1"]
    assert client.get("/metrics", **outside).status_code == 403
    spoofed = {"REMOTE_ADDR": "198.51.100.7", "HTTP_X_FORWARDED_FOR": "127.0.0.1"}
    assert client.get("/metrics", **spoofed).status_code == 403  # not from the proxy


def test_metrics_need_the_token_when_one_is_set(client, catalog, settings, token):
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    right = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **BEARER)
    assert right.status_code == 200 and b"gpupool_jobs" in right.content


def test_a_malformed_network_setting_fails_at_start_up():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DEBUG"],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "GPUPOOL_METRICS_ALLOWED_NETWORKS": "x"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "GPUPOOL_METRICS_ALLOWED_NETWORKS" in result.stderr
