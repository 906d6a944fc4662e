"""Rule (5): DCGM metrics: GPU nodes the configured Prometheus has no series for."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from clusters.doctor.facts import (
    NEW_NODE_GRACE,
    WARNING,
    DcgmFacts,
    Finding,
)
from clusters.doctor.nodes import (
    _gpu_nodes,
    _named,
    _plural,
    _verb,
)


def check_dcgm(
    dcgm: DcgmFacts | None,
    nodes: Iterable[Mapping[str, Any]],
    *,
    gpu_label: str,
    now: dt.datetime | None = None,
    grace: dt.timedelta = NEW_NODE_GRACE,
) -> list[Finding]:
    """Where a Prometheus URL is set: Prometheus answers, and it has DCGM exporter series for
    the cluster's GPU nodes (else the utilization pages and idle detection have nothing).
    Nodes still starting (younger than ``grace``, or NotReady) are not expected to report yet:
    the exporter starts after the driver and Prometheus scrapes it a minute later."""
    if dcgm is None or not dcgm.configured:
        return []
    if dcgm.error:
        return [
            Finding(
                code="dcgm-prometheus-unreadable",
                severity=WARNING,
                title="The cluster's Prometheus cannot be read",
                # Prometheus's error can name its host, a private address, or its own
                # internals: the explanation says what it means, the detail (admins) says how.
                explanation="Asking the cluster's Prometheus for DCGM metrics failed (platform "
                "admins see the error). GPU utilization and idle-job detection show nothing "
                "for this cluster.",
                fix="Check the cluster's Prometheus URL (it must reach the Prometheus HTTP API "
                "from the portal) and that Prometheus is up.",
                detail=dcgm.error,
            )
        ]
    gpu_nodes = [n for n in _gpu_nodes(nodes, gpu_label) if n.gpus_allocatable or n.gpus_capacity]
    settled = [n for n in gpu_nodes if not n.starting(now, grace)]
    if gpu_nodes and not settled:
        return []  # every GPU node is still starting: no exporter is expected to report yet
    gpu_nodes = settled
    if dcgm.series == 0:
        return [
            Finding(
                code="dcgm-no-data",
                severity=WARNING,
                title="Prometheus has no DCGM exporter data",
                explanation="A Prometheus URL is set for this cluster, but Prometheus holds no "
                "DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE series: the DCGM "
                "exporter is not running, or Prometheus does not scrape it. GPU utilization "
                "and idle-job detection show nothing for this cluster.",
                fix="Check the exporter (kubectl get pods -n gpu-operator -l "
                "app=nvidia-dcgm-exporter) and that Prometheus scrapes it (its ServiceMonitor "
                "needs the Prometheus operator's label selector; serviceMonitor.enabled=true "
                "in the GPU Operator's dcgmExporter values).",
                nodes=tuple(n.name for n in gpu_nodes),
            )
        ]
    if not dcgm.hosts:
        return []  # series without a host label: cannot tell nodes apart, nothing to say
    silent = [n.name for n in gpu_nodes if n.name not in dcgm.hosts]
    if not silent:
        return []
    return [
        Finding(
            code="dcgm-nodes-silent",
            severity=WARNING,
            title=f"{_plural(len(silent), 'GPU node')} "
            f"{_verb(len(silent), 'reports', 'report')} no DCGM metrics: {_named(silent)}",
            explanation="Prometheus has DCGM series for other nodes of this cluster but none "
            "for these: their DCGM exporter pod is not running (often a missing toleration "
            "or node selector), so jobs there show no GPU utilization.",
            fix="kubectl get pods -n gpu-operator -o wide -l app=nvidia-dcgm-exporter: "
            "find why no exporter runs on these nodes (taints, node selector, a crash).",
            nodes=tuple(silent),
        )
    ]
