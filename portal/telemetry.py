"""The histograms the scheduling cycle and the dispatcher observe where the work happens.

Plain prometheus-client, no Django: the core (``scheduling.cycle``, ``clusters.dispatch``)
records here, and ``dashboards.metrics`` exposes it at ``/metrics`` with the gauges it reads
from the database, so the dependency runs from the read-only dashboards to the core and never
back.
"""

from __future__ import annotations

import datetime as dt
import os

from prometheus_client import CollectorRegistry, Histogram, multiprocess, start_http_server

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


def histograms_registry() -> CollectorRegistry:
    """The histograms of every process sharing ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's
    multiprocess mode), or, without it, this process's own."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(SCHEDULER_CYCLE_SECONDS)
        registry.register(DISPATCH_LATENCY_SECONDS)
    return registry


def worker_metrics_serve(port: int) -> None:
    """Serve the histograms on ``port`` (``/metrics``, a daemon thread of the worker's main
    process). The pool's children write into the shared directory; this reads it per scrape."""
    start_http_server(port, registry=histograms_registry())
