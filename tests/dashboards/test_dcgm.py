"""DCGM utilization through a Prometheus we start here: a local HTTP server that answers
``/api/v1/query`` in Prometheus's API format from a table of series."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from clusters.models import Cluster
from dashboards.dcgm import (
    ENGINE_ACTIVE,
    GPU_UTIL,
    PrometheusError,
    gpu_metrics_collect,
    prometheus_url_check,
    promql,
)
from dashboards.models import JobUtilization, MetricsSource
from portal.models import Job
from rules.volcano import volcano_job_name
from tests.builders import running_row

pytestmark = pytest.mark.django_db


class FakePrometheus:
    """Answers instant queries: ``series`` is a list of (metric, labels, avg, max)."""

    def __init__(self) -> None:
        self.series: list[tuple[str, dict[str, str], float, float]] = []
        self.queries: list[str] = []
        self.delay = 0.0
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query).get("query", [""])[0]
                fake.queries.append(query)
                time.sleep(fake.delay)
                if url.path != "/api/v1/query" or fake.status != 200:
                    self.send_response(fake.status if fake.status != 200 else 404)
                    self.end_headers()
                    return
                function = "max" if query.startswith("max_over_time") else "avg"
                result = [
                    {
                        "metric": {"__name__": metric, **labels},
                        "value": [time.time(), str(mx if function == "max" else avg)],
                    }
                    for metric, labels, avg, mx in fake.series
                    if f"({metric}{{" in query
                ]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.stop()


@pytest.fixture
def metrics_env(settings):
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = True
    settings.GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS = 0.5
    settings.GPUPOOL_DCGM_IDLE_MINUTES = 30
    settings.GPUPOOL_DCGM_IDLE_PERCENT = 5.0


def _gpu(job: Job, index: int, namespace: str = "gpupool", *, exported: bool = False, **extra):
    pod = f"{volcano_job_name(str(job.public_id))}-master-0"
    labels = {"gpu": str(index), "UUID": f"GPU-{job.pk}-{index}", "Hostname": "a100-0", **extra}
    if exported:  # a ServiceMonitor scrape: the exporter's own pod, the workload's as exported_*
        labels.update(pod="dcgm-exporter-x1", namespace="gpu-operator")
        labels.update(exported_pod=pod, exported_namespace=namespace)
    else:
        labels.update(pod=pod, namespace=namespace)
    return labels


def _running(cluster: Cluster, team, *, name: str, gpus: int, started_minutes_ago: int) -> Job:
    return running_row(
        gpus=gpus,
        team=team,
        name=name,
        cluster=cluster,
        started_at=timezone.now() - dt.timedelta(minutes=started_minutes_ago),
    )


@pytest.fixture
def watched(db, catalog, vision, prometheus, metrics_env):
    east = Cluster.objects.create(
        name="east", api_url="https://k8s.test", prometheus_url=prometheus.url
    )
    idle = _running(east, vision, name="idle-run", gpus=2, started_minutes_ago=120)
    busy = _running(east, vision, name="busy-run", gpus=1, started_minutes_ago=120)
    young = _running(east, vision, name="young-run", gpus=1, started_minutes_ago=5)
    mig = _running(east, vision, name="mig-run", gpus=1, started_minutes_ago=120)
    prometheus.series = [
        (GPU_UTIL, _gpu(idle, 0), 1.0, 3.0),
        (GPU_UTIL, _gpu(idle, 1, exported=True), 0.5, 2.0),
        # a pod named like the idle job in someone else's namespace must not speak for it
        (GPU_UTIL, _gpu(idle, 2, namespace="intruder"), 95.0, 99.0),
        (GPU_UTIL, _gpu(busy, 0), 81.0, 97.0),
        (GPU_UTIL, _gpu(young, 0), 0.0, 0.0),
        (ENGINE_ACTIVE, _gpu(mig, 0, GPU_I_PROFILE="1g.10gb", GPU_I_ID="3"), 0.5, 0.75),
        ("DCGM_FI_DEV_FB_USED", _gpu(busy, 0), 30000.0, 30000.0),
        ("DCGM_FI_DEV_FB_FREE", _gpu(busy, 0), 50000.0, 50000.0),
    ]
    return east, {"idle": idle, "busy": busy, "young": young, "mig": mig}


def test_dcgm_series_are_attributed_to_jobs_by_pod_and_namespace(watched, prometheus):
    east, jobs = watched
    result = gpu_metrics_collect(cluster=east)
    assert result.ok and result.jobs == 4 and result.idle == 1
    u = {name: JobUtilization.objects.get(job=job) for name, job in jobs.items()}
    assert u["idle"].idle and u["idle"].gpus_reporting == 2
    assert u["idle"].gpu_util_avg == pytest.approx(0.75) and u["idle"].gpu_util_max == 3.0
    assert u["idle"].idle_since is not None
    assert not u["busy"].idle and u["busy"].gpu_util_avg == 81.0
    assert (u["busy"].memory_used_mib, u["busy"].memory_total_mib) == (30000.0, 80000.0)
    assert not u["young"].idle  # under 5 % but not for 30 minutes yet
    assert u["mig"].gpu_util_avg == 50.0 and u["mig"].gpu_util_max == 75.0  # engine ratio x 100
    source = MetricsSource.objects.get(cluster=east)
    assert source.ok and source.series > 0


def test_promql_holds_only_server_side_values(watched, prometheus):
    east, _jobs = watched
    gpu_metrics_collect(cluster=east)
    assert len(prometheus.queries) == 6
    allowed = re.compile(
        r'^(avg|max)_over_time\(DCGM_FI_[A-Z_]+\{(exported_pod|pod)=~"gp-\[0-9a-f\]\{32\}-\.\+"\}'
        r"\[30m\]\)( or (avg|max)_over_time\(DCGM_FI_[A-Z_]+\{(exported_pod|pod)="
        r'~"gp-\[0-9a-f\]\{32\}-\.\+"\}\[30m\]\))*$'
    )
    assert all(allowed.match(q) for q in prometheus.queries), prometheus.queries
    with pytest.raises(ValueError):
        promql("avg_over_time", 'up{job="x"} or vector(1)', window_minutes=30)


def test_label_names_from_settings_are_checked(settings):
    settings.GPUPOOL_DCGM_POD_LABELS = ['pod"} or vector(1) #']
    with pytest.raises(PrometheusError, match="invalid label names"):
        promql("avg_over_time", GPU_UTIL, window_minutes=30)


def test_idle_since_is_kept_while_the_job_stays_idle(watched, prometheus):
    east, jobs = watched
    gpu_metrics_collect(cluster=east)
    first = JobUtilization.objects.get(job=jobs["idle"]).idle_since
    gpu_metrics_collect(cluster=east, now=timezone.now() + dt.timedelta(minutes=2))
    assert JobUtilization.objects.get(job=jobs["idle"]).idle_since == first


def test_prometheus_down_keeps_the_last_reading_and_pages_say_unavailable(
    watched, prometheus, client, bob, root
):
    east, jobs = watched
    gpu_metrics_collect(cluster=east)
    prometheus.stop()
    result = gpu_metrics_collect(cluster=east)
    assert not result.ok and "cannot be reached" in result.message
    source = MetricsSource.objects.get(cluster=east)
    assert not source.ok and "cannot be reached" in source.message
    assert JobUtilization.objects.get(job=jobs["idle"]).idle  # the last reading stays
    client.force_login(bob)
    job_page = client.get(f"/jobs/{jobs['idle'].public_id}/").content.decode()
    assert "metrics unavailable" in job_page and "GPU utilization" in job_page
    assert "GPU metrics unavailable: east" in client.get("/").content.decode()
    client.force_login(root)
    clusters_page = client.get("/pool/clusters/").content.decode()
    assert "GPU metrics unavailable" in clusters_page
    assert "idle-run" in clusters_page  # the admin's idle allocations


def test_an_idle_job_page_says_so(watched, prometheus, client, bob):
    east, jobs = watched
    gpu_metrics_collect(cluster=east)
    client.force_login(bob)
    page = client.get(f"/jobs/{jobs['idle'].public_id}/").content.decode()
    assert "idle allocation" in page and "0.8 %" in page
    busy = client.get(f"/jobs/{jobs['busy'].public_id}/").content.decode()
    assert "idle allocation" not in busy and "81.0 %" in busy


def test_a_slow_prometheus_times_out_quickly(watched, prometheus, settings):
    east, _jobs = watched
    settings.GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS = 0.2
    prometheus.delay = 1.0
    started = time.monotonic()
    result = gpu_metrics_collect(cluster=east)
    assert not result.ok and "did not answer within 0.2 s" in result.message
    assert time.monotonic() - started < 1.0


def test_an_error_answer_is_reported_in_words(watched, prometheus):
    east, _jobs = watched
    prometheus.status = 503
    result = gpu_metrics_collect(cluster=east)
    assert not result.ok and result.message == "Prometheus answered HTTP 503"


@pytest.mark.parametrize(
    "url",
    ["ftp://prom.test/", "http://user:pw@127.0.0.1:9090", "http://169.254.169.254/", "file:///x"],
    ids=["ftp", "credentials", "cloud metadata", "file"],
)
def test_unsafe_prometheus_urls_are_refused(url, settings):
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = True
    with pytest.raises(PrometheusError):
        prometheus_url_check(url)


def test_loopback_needs_local_urls_allowed(settings):
    settings.GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = False
    with pytest.raises(PrometheusError, match="is a loopback or link-local address"):
        prometheus_url_check("http://127.0.0.1:9090")
