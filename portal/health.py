"""Health and readiness: ``/healthz``, ``/readyz`` and ``manage.py probe``.

``/healthz`` says only that the process answers (a liveness probe must not fail because
PostgreSQL restarts, or every pod would be killed at once). ``/readyz`` says whether this
process can serve: the database answers and holds every migration this code knows, and the
broker and the cache answer. A pod that is not ready is taken out of its Service until it is.

Both are answered by :class:`HealthMiddleware`, first in the chain, before the host check,
the HTTPS redirect, sessions and authentication: a kubelet probes the pod's IP address (not an
``ALLOWED_HOSTS`` name), over plain HTTP, without a cookie. The answer names each check and
``ok`` or what failed, never a host name, a user or a password.

Workers, beat and the cluster watcher serve no HTTP; ``manage.py probe worker|beat|watcher``
runs the same checks for them (exec probes, compose healthchecks), plus each one's own sign
of life (:func:`process_alive`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from kombu import Connection

from portal.models import WorkerBeat

log = logging.getLogger(__name__)

__all__ = [
    "HEALTH_PATHS",
    "HealthMiddleware",
    "heartbeat_touch",
    "process_alive",
    "readiness",
]

HEALTH_PATHS = ("/healthz", "/readyz")
BROKER_TIMEOUT_SECONDS = 2.0

# Once this process has seen every migration applied it stays so: its code cannot gain a
# migration while it runs, and migrations are never unapplied in production. Loading the
# migration graph costs ~100 ms, too much for every probe.
_migrated = False


def database_check() -> str:
    """``ok`` if a query answers and no migration this code holds is unapplied."""
    global _migrated
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    if _migrated:
        return "ok"
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        return f"{len(plan)} migrations not applied"
    _migrated = True
    return "ok"


def broker_check() -> str:
    """``ok`` if the Celery broker accepts a connection within two seconds."""
    with Connection(
        settings.CELERY_BROKER_URL,
        connect_timeout=BROKER_TIMEOUT_SECONDS,
        transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
    ) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS)
    return "ok"


def cache_check() -> str:
    """``ok`` if the cache answers. Redis is asked directly: the cache client swallows its
    errors on purpose (``DJANGO_REDIS_IGNORE_EXCEPTIONS``), so a write-read would hide it."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend.startswith("django_redis."):
        from django_redis import get_redis_connection

        get_redis_connection("default").ping()
        return "ok"
    cache.set("gpupool:readyz", "1", 10)
    return "ok" if cache.get("gpupool:readyz") == "1" else "no answer"


CHECKS: dict[str, Callable[[], str]] = {
    "database": database_check,
    "broker": broker_check,
    "cache": cache_check,
}


def readiness(names: tuple[str, ...] = ("database", "broker", "cache")) -> dict[str, str]:
    """Each named check's result: ``ok``, or a short reason (the error's type, never its text,
    which may hold a host or a password; the full error goes to the log)."""
    results: dict[str, str] = {}
    for name in names:
        try:
            results[name] = CHECKS[name]()
        except Exception as exc:
            log.warning("readiness: %s check failed: %s", name, exc)
            results[name] = f"unreachable ({type(exc).__name__})"
    return results


class HealthMiddleware:
    """Answers ``/healthz`` and ``/readyz`` before any other middleware runs (see module)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info.rstrip("/")
        if path == "/healthz":
            return JsonResponse({"status": "ok"})
        if path == "/readyz":
            # ?require=database: only the named checks (the web's probe; see the manifests).
            wanted = tuple(n for n in request.GET.get("require", "").split(",") if n)
            unknown = sorted(set(wanted) - set(CHECKS))
            if unknown:
                return JsonResponse(
                    {
                        "message": "Unknown readiness check.",
                        "extra": {"fields": {"require": [f"Not a check: {', '.join(unknown)}."]}},
                    },
                    status=400,
                )
            checks = readiness(wanted or tuple(CHECKS))
            ok = all(v == "ok" for v in checks.values())
            return JsonResponse(
                {"status": "ok" if ok else "unavailable", "checks": checks},
                status=200 if ok else 503,
            )
        return self.get_response(request)


# ---------------------------------------------------------------------------------------------
# Processes without HTTP: a heartbeat file, touched by the process, read by its probe
# ---------------------------------------------------------------------------------------------
def heartbeat_path(process: str) -> Path:
    """Where ``process`` (``watcher``) touches its heartbeat: ``GPUPOOL_RUN_DIR``
    (an emptyDir on Kubernetes; the read-only root filesystem allows no other place)."""
    return Path(settings.GPUPOOL_RUN_DIR) / f"{process}.alive"


def heartbeat_touch(process: str) -> None:
    """Mark ``process`` alive now (its loop calls this every turn)."""
    path = heartbeat_path(process)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def heartbeat_age(process: str) -> float | None:
    """Seconds since ``process`` last touched its heartbeat; None if it never did."""
    try:
        return time.time() - os.stat(heartbeat_path(process)).st_mtime
    except FileNotFoundError:
        return None


def process_alive(process: str, *, max_age_seconds: float, node: str = "") -> str:
    """``ok`` if ``process`` shows a sign of life no older than ``max_age_seconds``.

    A Celery worker beats a :class:`~portal.models.WorkerBeat` row every second, named after
    its node (``celery@<host>``); the probe runs in the worker's container, so the host is its
    own; ``node`` (the worker's ``-n``) narrows it to one worker where several share a host.
    The watcher touches a heartbeat file."""
    if process == "worker":
        since = timezone.now() - dt.timedelta(seconds=max_age_seconds)
        beats = WorkerBeat.objects.filter(seen_at__gte=since)
        if node:
            beats = beats.filter(name__startswith=f"{node}:")
        else:
            # The worker's node name is celery@<host> unless -n names it <anything>@<host>.
            beats = beats.filter(name__contains=f"@{socket.gethostname()}:")
        if beats.exists():
            return "ok"
        return f"no worker beat from {node or 'this host'}"
    age = heartbeat_age(process)
    if age is None:
        return "no heartbeat yet"
    if age > max_age_seconds:
        return f"heartbeat {age:.0f} s old"
    return "ok"
