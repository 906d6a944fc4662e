"""LOG_FORMAT=json: one JSON object a line, carrying the request id, user, job and cluster."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from clusters.tasks import evict_job, reconcile_cluster
from config.celery import task_log_context_enter, task_log_context_leave
from notifications.tasks import deliver
from tests.clusters.conftest import (  # noqa: F401  (fixtures)
    _cluster_settings,
    _fresh_clients,
    cluster,
    register,
    sim,
    sim_config,
    wait_for,
    watchers,
)
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root logger writes through the settings' JSON formatter and context filter into a
    buffer while the test runs."""
    buffer = io.StringIO()
    config = {
        **settings.LOGGING,
        "handlers": {
            "capture": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["context"],
                "stream": buffer,
            }
        },
        "root": {"handlers": ["capture"], "level": "INFO"},
    }
    logging.config.dictConfig(config)
    try:
        yield buffer
    finally:
        logging.config.dictConfig(settings.LOGGING)


def _lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


@pytest.mark.django_db
def test_a_page_request_logs_one_json_access_line_with_request_id_user_and_job(
    client, bob, vision, json_lines
):
    job = JobFactory(team=vision, owner=bob)
    client.force_login(bob)
    response = client.get(f"/jobs/{job.public_id}/", HTTP_X_REQUEST_ID="req-4711")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "req-4711"
    access = [line for line in _lines(json_lines) if line["logger"] == "portal.requests"]
    assert len(access) == 1
    line = access[0]
    assert line["request_id"] == "req-4711"
    assert line["user"] == "bob"
    assert line["job_id"] == str(job.public_id)
    assert line["status"] == 200 and line["method"] == "GET"
    assert line["level"] == "INFO" and "time" in line
    assert "cluster" not in line


@pytest.mark.django_db
def test_an_api_token_call_names_its_user_and_a_bad_request_id_is_replaced(api_as, bob, json_lines):
    response = api_as(bob).get("/api/v1/jobs/", HTTP_X_REQUEST_ID='"; drop table')
    assert response.status_code == 200
    given = response["X-Request-ID"]
    assert len(given) == 32 and given.isalnum()
    (line,) = [x for x in _lines(json_lines) if x["logger"] == "portal.requests"]
    assert line["request_id"] == given
    assert line["user"] == "bob"
    assert "job_id" not in line


def test_a_celery_tasks_lines_carry_its_job_or_cluster_by_parameter_name(json_lines):
    """``evict_job(42)`` is about job 42, ``reconcile_cluster(3)`` about cluster 3, and
    ``deliver(5)`` (a notification delivery) about neither."""
    log = logging.getLogger("clusters.tasks")
    for task_id, task, args in [
        ("t1", evict_job, (42,)),
        ("t2", reconcile_cluster, (3,)),
        ("t3", deliver, (5,)),
    ]:
        task_log_context_enter(task_id=task_id, task=task, args=args, kwargs={})
        try:
            log.info(task.name)
            if task is evict_job:
                log.info("explicit wins", extra={"job_id": "7"})
        finally:
            task_log_context_leave(task_id=task_id)
    log.info("after")
    lines = _lines(json_lines)
    assert [(x["message"], x.get("job_id"), x.get("cluster")) for x in lines] == [
        (evict_job.name, "42", None),
        ("explicit wins", "7", None),
        (reconcile_cluster.name, None, "3"),
        (deliver.name, None, None),
        ("after", None, None),
    ]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_real_process_logs_json_lines_when_asked():
    result = _manage("probe", "beat", LOG_FORMAT="json", CELERY_BROKER_URL="redis://127.0.0.1:1/0")
    assert result.returncode == 1
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(
        x["logger"] == "portal.health" and x["level"] == "WARNING" and "broker" in x["message"]
        for x in logged
    ), result.stderr


def test_an_unknown_log_format_names_the_variable():
    result = _manage("check", LOG_FORMAT="xml")
    assert result.returncode != 0
    assert "LOG_FORMAT must be plain or json, got 'xml'" in result.stderr


def test_a_cluster_watchers_lines_carry_its_cluster(sim, cluster, watchers, json_lines):  # noqa: F811
    """The watcher's threads log about one cluster each: every line says which, the way a
    Celery task's do (the cluster's id)."""
    sim.faults.add(verb="list", resource="jobs", status=500, count=1)
    watchers.start(cluster, "jobs")
    assert wait_for(
        lambda: any("watch " in line["message"] for line in _lines(json_lines)), timeout=30
    ), json_lines.getvalue()
    watch_lines = [line for line in _lines(json_lines) if line["logger"] == "clusters.watch"]
    assert watch_lines and all(line.get("cluster") == str(cluster.pk) for line in watch_lines)
