"""Real GPU utilization: DCGM exporter metrics read through a cluster's Prometheus.

Once a collection interval, for every cluster with a Prometheus URL, the collector asks the
Prometheus HTTP API (``/api/v1/query``) for each GPU's utilization over the idle window and
attributes the series to portal jobs by pod and namespace. Rules:

* PromQL is built only from constants and validated settings (metric names here, label names
  checked against Prometheus's label grammar, the pod-name pattern of the portal's own Volcano
  Jobs, the window in minutes). Nothing a user typed ever reaches a query.
* Short timeouts, no redirects, no proxies from the environment, a cap on the answer's size.
  A slow or broken Prometheus costs one collection, never a page: pages read what the last
  collection stored (``JobUtilization``, ``MetricsSource``) and show "metrics unavailable"
  when it failed.
* A series belongs to a job when its pod is ``gp-<job uuid hex>-<task>-<index>`` (the
  portal's deterministic Volcano Job name, ``rules/volcano/``) *and* its namespace is the
  one the job runs in, so a pod named like a job in another namespace cannot speak for it.
* With a ServiceMonitor the workload's labels arrive as ``exported_pod`` /
  ``exported_namespace``; both spellings are asked for (``GPUPOOL_DCGM_POD_LABELS``).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clusters.clients import cluster_prometheus_url_check
from clusters.models import Cluster
from clusters.urlcheck import UnsafeUrlError
from dashboards.models import JobUtilization, MetricsSource
from portal.models import HOLDING_STATES, Job, JobState
from rules.volcano import team_namespace_name

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, 0-100
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0-1, works per MIG instance
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB

# Prometheus label names (https://prometheus.io/docs/concepts/data_model/).
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Pods of the portal's Volcano Jobs: gp-<32 hex>-<task>-<index> (rules/volcano/).
POD_PATTERN = "gp-[0-9a-f]{32}-.+"
_POD = re.compile(r"^gp-([0-9a-f]{32})-[a-z0-9]([-a-z0-9]*[a-z0-9])?-\d+$")
# Labels that tell one GPU (or MIG instance) from another on a node.
_DEVICE_LABELS = ("Hostname", "hostname", "UUID", "uuid", "gpu", "GPU_I_ID")
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class PrometheusError(Exception):
    """Prometheus could not be asked or did not answer sensibly; the message says why."""


def _labels(names: Sequence[str], setting: str) -> tuple[str, ...]:
    bad = [n for n in names if not _LABEL_NAME.match(n)]
    if bad or not names:
        raise PrometheusError(f"{setting} holds invalid label names: {bad or 'none'}")
    return tuple(names)


def pod_labels() -> tuple[str, ...]:
    return _labels(settings.GPUPOOL_DCGM_POD_LABELS, "GPUPOOL_DCGM_POD_LABELS")


def namespace_labels() -> tuple[str, ...]:
    return _labels(settings.GPUPOOL_DCGM_NAMESPACE_LABELS, "GPUPOOL_DCGM_NAMESPACE_LABELS")


def promql(function: str, metric: str, *, window_minutes: int) -> str:
    """``function(metric{pod=~"gp-…"}[window])`` for each configured pod label, or-ed.

    Every piece is a constant or validated: ``function`` and ``metric`` come from this module,
    label names match the label grammar, the window is an int.
    """
    if function not in {"avg_over_time", "max_over_time"}:
        raise ValueError(function)
    if metric not in {GPU_UTIL, ENGINE_ACTIVE, FB_USED, FB_FREE}:
        raise ValueError(metric)
    window = int(window_minutes)
    return " or ".join(
        f'{function}({metric}{{{label}=~"{POD_PATTERN}"}}[{window}m])' for label in pod_labels()
    )


# ---------------------------------------------------------------------------------------------
# Talking to Prometheus
# ---------------------------------------------------------------------------------------------
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx becomes an HTTPError instead of a request somewhere else


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def prometheus_url_check(url: str) -> str:
    """The base URL without a trailing slash, if the portal may ask it; else PrometheusError.

    The clusters' URL guard (``clusters.clients.cluster_prometheus_url_check``), the one that
    also runs when the URL is registered: http or https, no user info, query or fragment;
    every address the host resolves to judged like a cluster API address (cloud metadata and
    unusable addresses never, loopback only where local cluster URLs are allowed). Checked
    again here because DNS may have changed since.
    """
    try:
        return cluster_prometheus_url_check(url or "")
    except UnsafeUrlError as exc:
        raise PrometheusError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Sample:
    labels: dict[str, str]
    value: float


def prometheus_query(*, base_url: str, query: str, at: dt.datetime, timeout: float) -> list[Sample]:
    """An instant vector query; NaN samples are dropped."""
    params = urllib.parse.urlencode({"query": query, "time": f"{at.timestamp():.3f}"})
    # base_url passed prometheus_url_check: http(s) only, so no file: or custom schemes.
    request = urllib.request.Request(  # noqa: S310
        f"{base_url}/api/v1/query?{params}", headers={"Accept": "application/json"}
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise PrometheusError(f"Prometheus answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise PrometheusError(f"Prometheus did not answer within {timeout:g} s") from None
        raise PrometheusError(f"Prometheus cannot be reached ({reason})") from None
    if len(body) > MAX_ANSWER_BYTES:
        raise PrometheusError("Prometheus's answer is too large")
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise PrometheusError(f"Prometheus refused the query: {doc.get('error', '?')}")
        data = doc["data"]
        if data["resultType"] != "vector":
            raise PrometheusError(f"expected a vector, got {data['resultType']}")
        samples = []
        for item in data["result"]:
            value = float(item["value"][1])
            if math.isfinite(value):
                samples.append(Sample({str(k): str(v) for k, v in item["metric"].items()}, value))
        return samples
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise PrometheusError(f"Prometheus's answer is not in the API format ({exc})") from None


# ---------------------------------------------------------------------------------------------
# Attribution
# ---------------------------------------------------------------------------------------------
def _first(labels: dict[str, str], names: Sequence[str]) -> str:
    for name in names:
        if labels.get(name):
            return labels[name]
    return ""


def series_owner(labels: dict[str, str]) -> tuple[str, str] | None:
    """(job uuid hex, namespace) a series speaks for, from its pod and namespace labels."""
    match = _POD.match(_first(labels, pod_labels()))
    namespace = _first(labels, namespace_labels())
    if match is None or not namespace:
        return None
    return match.group(1), namespace


def _device(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in _DEVICE_LABELS)


@dataclass
class JobReading:
    """What one job's GPUs reported over the window."""

    avg: dict[tuple[str, ...], float] = field(default_factory=dict)
    peak: dict[tuple[str, ...], float] = field(default_factory=dict)
    fb_used: dict[tuple[str, ...], float] = field(default_factory=dict)
    fb_free: dict[tuple[str, ...], float] = field(default_factory=dict)


def attribute(
    answers: dict[str, list[Sample]], expected_namespace: dict[str, str]
) -> dict[str, JobReading]:
    """Per job uuid hex, its GPUs' figures. ``expected_namespace``: job hex → namespace.

    A GPU with an engine-activity series (MIG instances, where GPU_UTIL is not measured) uses
    it (x 100); otherwise GPU_UTIL.
    """
    readings: dict[str, JobReading] = defaultdict(JobReading)
    engine: dict[str, dict[str, dict[tuple[str, ...], float]]] = defaultdict(
        lambda: {"avg": {}, "peak": {}}
    )
    slots = {
        "util_avg": "avg",
        "util_max": "peak",
        "engine_avg": "avg",
        "engine_max": "peak",
        "fb_used": "fb_used",
        "fb_free": "fb_free",
    }
    for name, samples in answers.items():
        for s in samples:
            owner = series_owner(s.labels)
            if owner is None or expected_namespace.get(owner[0]) != owner[1]:
                continue
            device = _device(s.labels)
            if name.startswith("engine"):
                engine[owner[0]][slots[name]][device] = s.value * 100.0
            else:
                getattr(readings[owner[0]], slots[name])[device] = s.value
    for job_hex, figures in engine.items():
        reading = readings[job_hex]
        reading.avg.update(figures["avg"])
        reading.peak.update(figures["peak"])
    return dict(readings)


# ---------------------------------------------------------------------------------------------
# The collector
# ---------------------------------------------------------------------------------------------
QUERIES = {
    "util_avg": ("avg_over_time", GPU_UTIL),
    "util_max": ("max_over_time", GPU_UTIL),
    "engine_avg": ("avg_over_time", ENGINE_ACTIVE),
    "engine_max": ("max_over_time", ENGINE_ACTIVE),
    "fb_used": ("avg_over_time", FB_USED),
    "fb_free": ("avg_over_time", FB_FREE),
}

Fetch = Callable[..., list[Sample]]


@dataclass(frozen=True)
class CollectResult:
    cluster: str
    ok: bool
    message: str = ""
    jobs: int = 0
    idle: int = 0


def _job_namespace(cluster: Any, team_slug: str) -> str:
    if getattr(cluster, "namespace_per_team", False):
        return team_namespace_name(team_slug)
    return cluster.namespace


def gpu_metrics_collect(
    *, cluster: Any, now: dt.datetime | None = None, fetch: Fetch = prometheus_query
) -> CollectResult:
    """Read one cluster's DCGM metrics and store each holding job's utilization."""
    now = now or timezone.now()
    window = settings.GPUPOOL_DCGM_IDLE_MINUTES
    timeout = settings.GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS
    deadline = time.monotonic() + 4 * timeout
    try:
        base = prometheus_url_check(getattr(cluster, "prometheus_url", ""))
        answers = {}
        for name, (function, metric) in QUERIES.items():
            if time.monotonic() > deadline:
                raise PrometheusError(f"Prometheus took longer than {4 * timeout:g} s in all")
            answers[name] = fetch(
                base_url=base,
                query=promql(function, metric, window_minutes=window),
                at=now,
                timeout=timeout,
            )
    except PrometheusError as exc:
        MetricsSource.objects.update_or_create(
            cluster=cluster, defaults={"checked_at": now, "ok": False, "message": str(exc)}
        )
        return CollectResult(cluster.name, False, str(exc))
    jobs = list(
        Job.objects.filter(cluster=cluster, state__in=HOLDING_STATES).values(
            "id", "public_id", "team__slug", "state", "started_at", "replicas", "gpus_per_replica"
        )
    )
    expected = {j["public_id"].hex: _job_namespace(cluster, j["team__slug"]) for j in jobs}
    readings = attribute(answers, expected)
    previous = {
        u.job_id: u for u in JobUtilization.objects.filter(job_id__in=[j["id"] for j in jobs])
    }
    threshold = settings.GPUPOOL_DCGM_IDLE_PERCENT
    rows, idle_count = [], 0
    for j in jobs:
        reading = readings.get(j["public_id"].hex, JobReading())
        gpus = j["replicas"] * j["gpus_per_replica"]
        reporting = len(reading.avg)
        peak = max(reading.peak.values()) if reading.peak else None
        held_long_enough = (
            j["state"] == JobState.RUNNING
            and j["started_at"] is not None
            and j["started_at"] <= now - dt.timedelta(minutes=window)
        )
        idle = bool(
            held_long_enough and reporting >= gpus and peak is not None and peak < threshold
        )
        before = previous.get(j["id"])
        since = None
        if idle:
            idle_count += 1
            since = (
                before.idle_since
                if before and before.idle and before.idle_since
                else now - dt.timedelta(minutes=window)
            )
        total_fb = [reading.fb_used[d] + reading.fb_free.get(d, 0.0) for d in reading.fb_used]
        rows.append(
            JobUtilization(
                job_id=j["id"],
                cluster=cluster,
                measured_at=now,
                window_minutes=window,
                gpus_reporting=reporting,
                gpu_util_avg=(sum(reading.avg.values()) / reporting) if reporting else None,
                gpu_util_max=peak,
                memory_used_mib=sum(reading.fb_used.values()) if reading.fb_used else None,
                memory_total_mib=sum(total_fb) if total_fb else None,
                idle=idle,
                idle_since=since,
            )
        )
    series = sum(len(v) for v in answers.values())
    with transaction.atomic():
        JobUtilization.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=[
                "cluster",
                "measured_at",
                "window_minutes",
                "gpus_reporting",
                "gpu_util_avg",
                "gpu_util_max",
                "memory_used_mib",
                "memory_total_mib",
                "idle",
                "idle_since",
            ],
        )
        MetricsSource.objects.update_or_create(
            cluster=cluster,
            defaults={"checked_at": now, "ok": True, "message": "", "series": series},
        )
    return CollectResult(cluster.name, True, jobs=len(rows), idle=idle_count)


# Which nodes have any DCGM series at all (the cluster doctor's question): one instant query,
# counted per exporter host label, whichever spelling the exporter's release writes.
PRESENCE_QUERY = " or ".join(
    f"count by (Hostname, hostname) ({metric})" for metric in (GPU_UTIL, ENGINE_ACTIVE)
)


def dcgm_presence(cluster: Any, *, fetch: Fetch = prometheus_query) -> dict[str, Any]:
    """The answer to ``portal.hooks.dcgm_presence``: ``{"error": words or "", "hosts": node
    names with DCGM series, "series": how many series}`` for the cluster's Prometheus."""
    try:
        base = prometheus_url_check(getattr(cluster, "prometheus_url", ""))
        samples = fetch(
            base_url=base,
            query=PRESENCE_QUERY,
            at=timezone.now(),
            timeout=settings.GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS,
        )
    except PrometheusError as exc:
        return {"error": str(exc), "hosts": [], "series": 0}
    hosts = sorted({h for s in samples if (h := _first(s.labels, ("Hostname", "hostname")))})
    return {"error": "", "hosts": hosts, "series": int(sum(s.value for s in samples))}


def gpu_metrics_collect_all(*, now: dt.datetime | None = None) -> list[CollectResult]:
    """Every cluster with a Prometheus URL, one after the other (each bounded in time)."""
    if not any(f.name == "prometheus_url" for f in Cluster._meta.get_fields()):
        return []
    return [
        gpu_metrics_collect(cluster=c, now=now)
        for c in Cluster.objects.exclude(prometheus_url="").order_by("name")
    ]
