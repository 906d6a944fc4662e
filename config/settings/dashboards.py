"""The dashboards: snapshots and their retention, wait-time window, cost, DCGM, /metrics, and
their periodic tasks."""

from __future__ import annotations

import ipaddress

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from config.settings.celery import CELERY_BEAT_SCHEDULE
from config.settings.environment import _env_float, env, env_bool, env_int, env_secret

# ---------------------------------------------------------------------------------------------
# Dashboards: snapshots and their retention, wait-time window, cost, DCGM, /metrics
# ---------------------------------------------------------------------------------------------
GPUPOOL_DASHBOARD_REFRESH_SECONDS = env_int("GPUPOOL_DASHBOARD_REFRESH_SECONDS", 15, minimum=1)
# Every other team's name and aggregate figures (GPUs, quota, shares, waits; never its jobs)
# on the pool overview and fair-share pages; false folds them into "other teams".
GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS = env_bool("GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS", True)
GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS = env_int(
    "GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS", 30, minimum=1
)
GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS = env_int(
    "GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS", 365, minimum=1
)
GPUPOOL_WAIT_WINDOW_HOURS = env_int("GPUPOOL_WAIT_WINDOW_HOURS", 24 * 7, minimum=1)
# Chargeback price of one cost-factor-1.0 GPU-hour; 0 = use each model's catalog price.
GPUPOOL_PRICE_PER_GPU_HOUR = _env_float("GPUPOOL_PRICE_PER_GPU_HOUR", 0.0)
GPUPOOL_COST_CURRENCY = env.str("GPUPOOL_COST_CURRENCY", default="USD")
# DCGM exporter metrics through each cluster's Prometheus (Cluster.prometheus_url).
GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS = _env_float(
    "GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS", 3.0, minimum=0.1
)
GPUPOOL_DCGM_INTERVAL = env_int("GPUPOOL_DCGM_INTERVAL", 60, minimum=10)
GPUPOOL_DCGM_IDLE_PERCENT = _env_float("GPUPOOL_DCGM_IDLE_PERCENT", 5.0)
GPUPOOL_DCGM_IDLE_MINUTES = env_int("GPUPOOL_DCGM_IDLE_MINUTES", 30, minimum=1)
GPUPOOL_DCGM_POD_LABELS = env.list("GPUPOOL_DCGM_POD_LABELS", default=["exported_pod", "pod"])
GPUPOOL_DCGM_NAMESPACE_LABELS = env.list(
    "GPUPOOL_DCGM_NAMESPACE_LABELS", default=["exported_namespace", "namespace"]
)
# /metrics: the caller's address must be in one of these networks, and when a token is set the
# request must carry it (Authorization: Bearer …). Both apply when both are set.
GPUPOOL_METRICS_TOKEN = env_secret("GPUPOOL_METRICS_TOKEN") or ""
# Without a token /metrics answers nobody, unless this is explicitly switched off: behind a
# reverse proxy on the same host every request comes from loopback, so the network check alone
# would let the world in.
GPUPOOL_METRICS_REQUIRE_TOKEN = env_bool("GPUPOOL_METRICS_REQUIRE_TOKEN", True)
GPUPOOL_METRICS_ALLOWED_NETWORKS = env.list(
    "GPUPOOL_METRICS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"]
)
for _network in GPUPOOL_METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network.strip(), strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(
            f"GPUPOOL_METRICS_ALLOWED_NETWORKS: {_network!r} is not a network ({_exc})"
        ) from _exc
CELERY_BEAT_SCHEDULE.update(
    {
        "dashboards-snapshot": {
            "task": "dashboards.snapshot",
            "schedule": crontab(),  # at the start of every minute: one snapshot per minute
            "options": {"expires": 55.0},
        },
        "dashboards-downsample": {"task": "dashboards.downsample", "schedule": 300.0},
        "dashboards-prune": {"task": "dashboards.prune", "schedule": 3600.0},
        "dashboards-dcgm": {
            "task": "dashboards.collect_gpu_metrics",
            "schedule": float(GPUPOOL_DCGM_INTERVAL),
            "options": {"expires": float(GPUPOOL_DCGM_INTERVAL)},
        },
    }
)
