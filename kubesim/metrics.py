"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics, as metrics-server serves them.

``kubectl top node`` and ``kubectl top pod`` read this aggregated API. kubesim has no cgroups to
sample, so usage is modelled, deterministically: a running container uses 80% of its CPU request
and 70% of its memory request (its limit when it has no request; 10m and 32Mi when it has
neither), and every node adds its system daemons (250m CPU, 1Gi). A node's usage is the sum over
the pods running on it. GPUs are not part of the metrics API (DCGM exports them).

Pure functions over stored objects, plus the discovery documents of the group.
"""

from __future__ import annotations

from typing import Any

from kubesim.clock import wall_text
from kubesim.quantity import resource_list_to_milli

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
WINDOW = "20s"
SYSTEM_CPU_MILLI = 250
SYSTEM_MEMORY = 1 << 30
MIB = 1 << 20


def api_group() -> dict[str, Any]:
    """The ``APIGroup`` entry of ``/apis``."""
    gv = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [gv],
        "preferredVersion": gv,
    }


def resource_list() -> dict[str, Any]:
    """``/apis/metrics.k8s.io/v1beta1``."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": "nodes",
                "singularName": "",
                "namespaced": False,
                "kind": "NodeMetrics",
                "verbs": ["get", "list"],
            },
            {
                "name": "pods",
                "singularName": "",
                "namespaced": True,
                "kind": "PodMetrics",
                "verbs": ["get", "list"],
            },
        ],
    }


def _format_cpu(milli_cores: int) -> str:
    return f"{milli_cores * 1_000_000}n"


def _format_memory(milli_bytes: int) -> str:
    return f"{milli_bytes // 1000 // 1024}Ki"


def container_usage(container: dict[str, Any]) -> tuple[int, int]:
    """Modelled (CPU in millicores, memory in thousandths of a byte) of a running container.

    The units are :func:`kubesim.quantity.resource_list_to_milli`'s.
    """
    resources = container.get("resources") or {}
    requests = resource_list_to_milli(resources.get("requests"))
    limits = resource_list_to_milli(resources.get("limits"))
    cpu = requests.get("cpu") or limits.get("cpu") or 10
    memory = requests.get("memory") or limits.get("memory") or 32 * MIB * 1000
    return cpu * 8 // 10, memory * 7 // 10


def running(pod: dict[str, Any]) -> bool:
    """Whether the pod's containers are running (only those use anything)."""
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


def pod_metrics(pod: dict[str, Any]) -> dict[str, Any]:
    """PodMetrics of a running pod."""
    containers = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        cpu, memory = container_usage(container)
        containers.append(
            {
                "name": container.get("name", ""),
                "usage": {"cpu": _format_cpu(cpu), "memory": _format_memory(memory)},
            }
        )
    meta = pod["metadata"]
    return {
        "kind": "PodMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "labels": dict(meta.get("labels") or {}),
            "creationTimestamp": wall_text(),
        },
        "timestamp": wall_text(),
        "window": WINDOW,
        "containers": containers,
    }


def node_metrics(node: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """NodeMetrics of a node from the running pods bound to it."""
    cpu, memory = SYSTEM_CPU_MILLI, SYSTEM_MEMORY * 1000
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            used_cpu, used_memory = container_usage(container)
            cpu += used_cpu
            memory += used_memory
    meta = node["metadata"]
    return {
        "kind": "NodeMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {
            "name": meta["name"],
            "labels": dict(meta.get("labels") or {}),
            "creationTimestamp": wall_text(),
        },
        "timestamp": wall_text(),
        "window": WINDOW,
        "usage": {"cpu": _format_cpu(cpu), "memory": _format_memory(memory)},
    }


def metrics_list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """``NodeMetricsList`` / ``PodMetricsList``."""
    return {
        "kind": f"{kind}List",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": items,
    }
