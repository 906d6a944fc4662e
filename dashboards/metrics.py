"""The portal's Prometheus metrics, served at ``/metrics``.

Two kinds, because they live in different processes:

* **Gauges read from the database at scrape time** (``PortalCollector``): jobs by state, pool
  GPUs by state per cluster and model, queue length per model waited for, idle allocations,
  the age of the last snapshot. Whichever web process answers the scrape gives the same
  figures, because the database is the truth.
* **Histograms observed where the work happens**: the scheduling cycle and the dispatcher run
  in Celery workers, so they call ``portal.telemetry``'s ``observe_cycle`` and
  ``observe_dispatch`` there. For the web process to serve what workers observed, run every
  process with ``PROMETHEUS_MULTIPROC_DIR``
  pointing at one shared, emptied-at-start directory (prometheus-client's multiprocess mode);
  without it ``/metrics`` shows the histograms of the serving process only.

The histograms themselves are defined in :mod:`portal.telemetry`, which the cycle and the
dispatcher import; this module only exposes them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from clusters.models import Cluster
from dashboards.estimates import start_errors
from dashboards.live import LiveState
from dashboards.live_types import NO_MODEL
from dashboards.models import JobUtilization, MetricsSource, SnapshotRun
from portal.models import ACTIVE_STATES, TERMINAL_STATES, Job, JobState
from portal.telemetry import histograms_registry

TERMINAL_COUNTS_CACHE_KEY = "dashboards:terminal-job-counts"
TERMINAL_COUNTS_SECONDS = 300


class PortalCollector(Collector):
    """Gauges computed from the database on every scrape (a handful of grouped queries)."""

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("gpupool_jobs", "Jobs by state.", labels=["state"])
        oldest = GaugeMetricFamily(
            "gpupool_jobs_oldest_seconds",
            "Seconds the longest-waiting job of each unfinished state has been in it (QUEUED: "
            "the longest wait; a transient state: a job stuck there).",
            labels=["state"],
        )
        now = timezone.now()
        counts = {}
        for state, n, since in (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("state")
            .annotate(n=Count("id"), since=Min("state_changed_at"))
            .values_list("state", "n", "since")
        ):
            counts[state] = n
            oldest.add_metric([state], max(0.0, (now - since).total_seconds()))
        # Finished jobs only grow and counting them scans the table: cache the count a while.
        key = _per_database(TERMINAL_COUNTS_CACHE_KEY)
        terminal = cache.get(key)
        if terminal is None:
            terminal = dict(
                Job.objects.filter(state__in=TERMINAL_STATES)
                .values("state")
                .annotate(n=Count("id"))
                .values_list("state", "n")
            )
            cache.set(key, terminal, TERMINAL_COUNTS_SECONDS)
        counts.update(terminal)
        for state in JobState:
            jobs.add_metric([state.value], counts.get(state.value, 0))
        yield jobs
        yield oldest
        reachable = GaugeMetricFamily(
            "gpupool_cluster_reachable",
            "1 while the portal reaches a registered cluster's API server, 0 once it has not "
            "answered (clusters.clients.cluster_unreachable_mark).",
            labels=["cluster"],
        )
        for name, since in Cluster.objects.values_list("name", "unreachable_since"):
            reachable.add_metric([name], 0 if since else 1)
        yield reachable

        live = LiveState()
        gpus = GaugeMetricFamily(
            "gpupool_pool_gpus",
            "Allocatable GPUs by state: allocated (portal jobs), used_by_others (other pods), "
            "free (schedulable), unavailable (on NotReady or cordoned nodes).",
            labels=["cluster", "model", "state"],
        )
        nodes = GaugeMetricFamily(
            "gpupool_pool_nodes_not_ready", "GPU nodes not ready.", labels=["cluster", "model"]
        )
        for cell in live.cells.values():
            cluster = live.clusters[cell.cluster_id].name
            model = live.models[cell.gpu_model_id].key
            for state in ("allocated", "used_by_others", "free", "unavailable"):
                gpus.add_metric([cluster, model, state], getattr(cell, f"gpus_{state}"))
            nodes.add_metric([cluster, model], cell.nodes_not_ready)
        yield gpus
        yield nodes

        queue_jobs = GaugeMetricFamily(
            "gpupool_queue_jobs", "Queued jobs by the model they wait for.", labels=["model"]
        )
        queue_gpus = GaugeMetricFamily(
            "gpupool_queue_gpus", "GPUs asked for by queued jobs.", labels=["model"]
        )
        per_model: dict[str, list[int]] = {}
        for (_team, model_id), (n, g) in live.queued.items():
            key = "none" if model_id == NO_MODEL else live.models[model_id].key
            slot = per_model.setdefault(key, [0, 0])
            slot[0] += n
            slot[1] += g
        for key, (n, g) in sorted(per_model.items()):
            queue_jobs.add_metric([key], n)
            queue_gpus.add_metric([key], g)
        yield queue_jobs
        yield queue_gpus

        idle = JobUtilization.objects.filter(idle=True, job__state__in=[JobState.RUNNING]).count()
        yield GaugeMetricFamily(
            "gpupool_idle_allocations",
            "Running jobs whose GPUs stayed under the idle threshold for the whole window.",
            value=idle,
        )
        up = GaugeMetricFamily(
            "gpupool_prometheus_up",
            "Whether the last read of a cluster's Prometheus worked.",
            labels=["cluster"],
        )
        for name, ok in MetricsSource.objects.values_list("cluster__name", "ok"):
            up.add_metric([name], 1 if ok else 0)
        yield up
        last = SnapshotRun.objects.order_by("-at").values_list("taken_at", flat=True).first()
        age = (timezone.now() - last).total_seconds() if last else float("nan")
        yield GaugeMetricFamily(
            "gpupool_snapshot_age_seconds", "Seconds since the last pool snapshot.", value=age
        )
        yield from estimate_error_metrics()


def _per_database(key: str) -> str:
    """A cache key of this database's figures: databases sharing one Redis (tests, a staging
    portal beside production) never read each other's."""
    return f"{key}:{connection.settings_dict['NAME']}"


def metrics_cache_forget() -> None:
    """Drop the figures ``/metrics`` keeps a while, so the next scrape reads them afresh."""
    cache.delete_many(
        [_per_database(TERMINAL_COUNTS_CACHE_KEY), _per_database(ESTIMATE_ERRORS_CACHE_KEY)]
    )


ESTIMATE_ERROR_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 24 * 3600.0)
"""Seconds: 1 min, 5 min, 15 min, 30 min, 1 h, 3 h, 6 h, 1 day."""
ESTIMATE_ERRORS_CACHE_KEY = "dashboards:estimate-errors"
ESTIMATE_ERRORS_SECONDS = 60
ESTIMATE_ERRORS_DAYS = 7


def estimate_error_metrics() -> Iterator[Metric]:
    """The first start estimate's absolute error over the starts of the last 7 days, as a
    histogram, and the share of them inside the range shown (read from the estimate records,
    cached for a minute: the same figures whichever process answers)."""
    key = _per_database(ESTIMATE_ERRORS_CACHE_KEY)
    cached = cache.get(key)
    if cached is None:
        errors = start_errors(since=timezone.now() - dt.timedelta(days=ESTIMATE_ERRORS_DAYS))
        cached = ([e for e, *_ in errors], [i for _, _, i, _ in errors if i is not None])
        cache.set(key, cached, ESTIMATE_ERRORS_SECONDS)
    errs, inside = cached
    buckets = [(str(b), sum(1 for e in errs if e <= b)) for b in ESTIMATE_ERROR_BUCKETS] + [
        ("+Inf", len(errs))
    ]
    yield HistogramMetricFamily(
        "gpupool_start_estimate_error_seconds",
        "Absolute error of each job's first start estimate against its actual start (jobs "
        f"started in the last {ESTIMATE_ERRORS_DAYS} days).",
        buckets=buckets,
        sum_value=sum(errs),
    )
    yield GaugeMetricFamily(
        "gpupool_start_estimate_inside_range_ratio",
        "Share of those starts inside the first estimate's likely range (NaN: none yet).",
        value=sum(inside) / len(inside) if inside else float("nan"),
    )


def metrics_exposition() -> bytes:
    """The metrics in the text exposition format, gauges fresh from the database."""
    registry = histograms_registry()
    registry.register(PortalCollector())
    return generate_latest(registry)
