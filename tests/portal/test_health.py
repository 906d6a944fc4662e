"""/healthz, /readyz and ``manage.py probe``, against the real PostgreSQL and Redis (and a
dead port where a service is down)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from portal import health
from portal.models import WorkerBeat
from tests.clusters.conftest import _database_url, _test_broker, worker_start

ROOT = Path(__file__).resolve().parents[2]
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connection refused at once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _forget_migrated(monkeypatch):
    monkeypatch.setattr(health, "_migrated", False)


def test_healthz_answers_a_kubelet_probe_without_touching_the_database(client, settings):
    """A probe comes to the pod's IP over plain HTTP: no ALLOWED_HOSTS name, no HTTPS."""
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/healthz", HTTP_HOST="10.244.3.17:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_ok_when_database_broker_and_cache_answer(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "run with the real Redis broker"
    response = client.get("/readyz", HTTP_HOST="10.244.3.17:8000")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "cache": "ok"},
    }


@pytest.mark.django_db
def test_readyz_fails_when_the_broker_is_down(client, settings):
    settings.CELERY_BROKER_URL = DEAD_REDIS
    started = time.monotonic()
    response = client.get("/readyz")
    assert time.monotonic() - started < 10  # a probe's timeout, not the kernel's
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["broker"].startswith("unreachable")
    assert body["checks"]["database"] == "ok"
    assert "127.0.0.1" not in response.content.decode()  # no address in a public answer


@pytest.mark.django_db
def test_readyz_may_require_only_the_database_as_the_webs_probe_does(client, settings):
    """The portal serves through a Redis outage by design: the web's probe asks for the
    database only, so Redis down does not empty the Service."""
    settings.CELERY_BROKER_URL = DEAD_REDIS
    response = client.get("/readyz?require=database")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok"}}
    bad = client.get("/readyz?require=database,disk")
    assert bad.status_code == 400
    assert bad.json()["extra"]["fields"] == {"require": ["Not a check: disk."]}


@pytest.mark.django_db
def test_readyz_fails_when_the_cache_is_down(client, settings):
    cache = dict(settings.CACHES["default"])
    assert cache["BACKEND"].startswith("django_redis."), "run with the real Redis cache"
    settings.CACHES = {"default": {**cache, "LOCATION": "redis://127.0.0.1:1/1"}}
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["cache"].startswith("unreachable")
    assert response.json()["checks"]["broker"] == "ok"


@pytest.mark.django_db
def test_readyz_fails_while_a_migration_is_not_applied(client):
    """A web pod of a new release is not ready before the migration Job ran."""
    last = MigrationRecorder.Migration.objects.filter(app="portal").order_by("-id").first()
    assert last is not None
    last.delete()  # rolled back with the test's transaction
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "1 migrations not applied"


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db
def test_probe_fails_naming_the_database_when_it_is_down():
    result = _manage("probe", "web", DATABASE_URL=f"postgres://postgres@127.0.0.1:{_free_port()}/x")
    assert result.returncode == 1
    assert "database: unreachable (OperationalError)" in result.stdout
    assert "broker: ok" in result.stdout
    assert "web not ready: database" in result.stderr


@pytest.mark.django_db
def test_probe_beat_fails_when_the_broker_is_down():
    assert _manage("probe", "beat").returncode == 0
    result = _manage("probe", "beat", CELERY_BROKER_URL=DEAD_REDIS)
    assert result.returncode == 1
    assert "broker: unreachable" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_probe_worker_follows_the_real_workers_beat(tmp_path):
    """Ready while a Celery worker on this host beats; not once it stopped."""
    broker, _ = _test_broker()
    queue = f"gpupool-probe-{uuid.uuid4().hex[:8]}"
    # Other tests' workers may beat on this host: this one is named by its node.
    node = f"{queue}@{socket.gethostname()}"
    with pytest.raises(CommandError, match="worker not ready: alive"):
        call_command("probe", "worker", "--node", node)
    worker = worker_start(
        queue=queue,
        broker=broker,
        database_url=_database_url(),
        log_path=tmp_path / "worker.log",
    )
    try:
        deadline = time.monotonic() + 10
        while not WorkerBeat.objects.filter(name__startswith=f"{node}:").exists():
            assert time.monotonic() < deadline, "the worker never beat"
            time.sleep(0.2)
        call_command("probe", "worker", "--node", node)
        call_command("probe", "worker")  # any worker on this host: this one at least
        call_command("probe", "worker", "--alive-only", "--node", node)
    finally:
        worker.stop()
    with pytest.raises(CommandError, match="worker not ready: alive"):
        call_command("probe", "worker", "--node", node)


@pytest.mark.django_db
def test_probe_worker_is_not_fooled_by_an_old_beat_or_another_host():
    now = timezone.now()
    host = socket.gethostname()
    WorkerBeat.objects.create(
        name=f"celery@{host}:1:aaaaaa", seen_at=now - timezone.timedelta(minutes=5)
    )
    WorkerBeat.objects.create(name="celery@elsewhere:2:bbbbbb", seen_at=now)
    WorkerBeat.objects.create(name=f"other@{host}:3:cccccc", seen_at=now)
    node = f"celery@{host}"
    assert health.process_alive("worker", max_age_seconds=30, node=node) == (
        f"no worker beat from {node}"
    )
    assert health.process_alive("worker", max_age_seconds=30) == "ok"  # other@host beats


@pytest.mark.django_db(transaction=True)
def test_probe_watcher_follows_the_running_watchers_heartbeat(tmp_path):
    run_dir = tmp_path / "run"
    env = {"GPUPOOL_RUN_DIR": str(run_dir), "DATABASE_URL": _database_url()}
    assert "no heartbeat yet" in _manage("probe", "watcher", **env).stdout
    watcher = subprocess.Popen(
        [sys.executable, "manage.py", "watch_clusters", "--refresh", "1"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (run_dir / "watcher.alive").exists():
            assert watcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        result = _manage("probe", "watcher", **env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines() == ["database: ok", "alive: ok"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
    # A watcher that stopped beating (hung, or gone) for longer than a minute is not alive.
    old = time.time() - 120
    os.utime(run_dir / "watcher.alive", (old, old))
    result = _manage("probe", "watcher", "--alive-only", **env)
    assert result.returncode == 1
    assert re.search(r"^alive: heartbeat 1[2-9]\d s old$", result.stdout, re.M), result.stdout
