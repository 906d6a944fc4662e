"""The histograms a Celery worker observes reach Prometheus: on the worker's own metrics port
(Kubernetes: web and workers are separate pods) and, through the shared
``PROMETHEUS_MULTIPROC_DIR``, on the web's /metrics (docker-compose)."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from config.celery import app
from dashboards.metrics import metrics_exposition
from tests.clusters.conftest import _database_url, _test_broker, app_publishing_to, worker_start


def _cycles(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpupool_scheduler_cycle_seconds_count":
                return sample.value
    return 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.django_db(transaction=True)
def test_a_workers_cycle_histogram_is_served_by_the_worker_and_by_the_web(
    tmp_path, monkeypatch, catalog
):
    shared = tmp_path / "prometheus"
    shared.mkdir()
    port = _free_port()
    broker, _ = _test_broker()
    queue = f"gpupool-metrics-{uuid.uuid4().hex[:8]}"
    worker = worker_start(
        queue=queue,
        broker=broker,
        database_url=_database_url(),
        log_path=tmp_path / "worker.log",
        extra_env={
            "PROMETHEUS_MULTIPROC_DIR": str(shared),
            "GPUPOOL_WORKER_METRICS_PORT": str(port),
        },
    )
    try:
        with app_publishing_to(broker, queue, tasks="scheduling"):
            app.send_task("scheduling.run_cycle", queue=queue)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    served = r.read().decode()
            except OSError:
                served = ""
            if _cycles(served) >= 1:
                break
            assert time.monotonic() < deadline, served or worker.log_path.read_text()[-2000:]
            time.sleep(0.3)
    finally:
        worker.stop()
    # The web process reading the same directory serves the worker's cycle too.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(shared))
    assert _cycles(metrics_exposition().decode()) >= 1
