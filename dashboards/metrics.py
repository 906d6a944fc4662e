"""The portal's Prometheus metrics, served at ``/metrics``.

Two kinds, because they live in different processes:

* **Gauges read from the database at scrape time** (``PortalCollector``): jobs by state, pool
  GPUs by state per cluster and model, queue length per first-choice model, idle allocations,
  the age of the last snapshot. Whichever web process answers the scrape gives the same
  figures, because the database is the truth.
* **Histograms observed where the work happens**: the scheduling cycle and the dispatcher run
  in Celery workers, so they call ``observe_cycle`` / ``observe_dispatch`` there. For the web
  process to serve what workers observed, run every process with ``PROMETHEUS_MULTIPROC_DIR``
  pointing at one shared, emptied-at-start directory (prometheus-client's multiprocess mode);
  without it ``/metrics`` shows the histograms of the serving process only.

This module imports nothing of Django at import time, so ``scheduling.cycle`` and the clusters
dispatcher can import it without an import cycle.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

SCHEDULER_CYCLE_SECONDS = Histogram(
    "gpupool_scheduler_cycle_seconds",
    "Duration of one scheduling cycle (snapshot, decide, persist), seconds.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
DISPATCH_LATENCY_SECONDS = Histogram(
    "gpupool_dispatch_latency_seconds",
    "Time from a job's admission to its Volcano Job existing on the cluster, seconds.",
    ["cluster"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)


def observe_cycle(*, seconds: float) -> None:
    """Record one scheduling cycle's duration (called by ``scheduling.cycle.run_cycle``)."""
    SCHEDULER_CYCLE_SECONDS.observe(seconds)


def observe_dispatch(
    *, cluster: str, admitted_at: dt.datetime | None, now: dt.datetime | None = None
) -> None:
    """Record admission → Volcano Job created for one job (called by the dispatcher once the
    job is SUBMITTED); a job without an admission time is not counted."""
    if admitted_at is None:
        return
    now = now or dt.datetime.now(tz=dt.UTC)
    seconds = max(0.0, (now - admitted_at).total_seconds())
    DISPATCH_LATENCY_SECONDS.labels(cluster=cluster).observe(seconds)


TERMINAL_COUNTS_CACHE_KEY = "dashboards:terminal-job-counts"
TERMINAL_COUNTS_SECONDS = 300


class PortalCollector(Collector):
    """Gauges computed from the database on every scrape (a handful of grouped queries)."""

    def collect(self) -> Iterator[Metric]:
        from django.core.cache import cache
        from django.db import connection
        from django.db.models import Count
        from django.utils import timezone

        from dashboards.live import NO_MODEL, LiveState
        from dashboards.models import JobUtilization, MetricsSource, SnapshotRun
        from portal.models import ACTIVE_STATES, TERMINAL_STATES, Job, JobState

        jobs = GaugeMetricFamily("gpupool_jobs", "Jobs by state.", labels=["state"])
        counts = dict(
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("state")
            .annotate(n=Count("id"))
            .values_list("state", "n")
        )
        # Finished jobs only grow and counting them scans the table: cache the count a while.
        # Keyed by database, so test databases sharing one Redis never read each other's.
        key = f"{TERMINAL_COUNTS_CACHE_KEY}:{connection.settings_dict['NAME']}"
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
            "gpupool_queue_jobs", "Queued jobs by first-choice model.", labels=["model"]
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


def metrics_exposition() -> bytes:
    """The metrics in the text exposition format, gauges fresh from the database."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(SCHEDULER_CYCLE_SECONDS)
        registry.register(DISPATCH_LATENCY_SECONDS)
    registry.register(PortalCollector())
    return generate_latest(registry)
