"""What the pods the portal did not create hold on a cluster's nodes, for the inventory
(:mod:`clusters.inventory`): GPUs per resource, a shared device's MiB and compute, CPU and
memory; and the portal's own pods being deleted that no job's books count any more
(:func:`portal_pods_left_behind`), counted as another's use."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from clusters.bindings import job_uuid_of
from clusters.devices import allocated_devices
from clusters.kube import parse_quantity
from clusters.nodes import SHARED_MEMORY_RESOURCES, is_gpu_resource, quantity
from portal.models import HOLDING_STATES, Job
from rules import volcano


def foreign_device_use(
    pods: Iterable[dict[str, Any]], left_behind: Collection[str] = ()
) -> dict[tuple[str, str], tuple[int, int]]:
    """(MiB, compute %) per (node, device UUID) that foreign pods' shares hold, as their
    schedulers wrote it on them (HAMi's and Volcano vGPU's allocation annotations); the same
    pods as :func:`foreign_gpu_use` counts."""
    used: dict[tuple[str, str], tuple[int, int]] = {}
    for node, pod in foreign_pods(pods, left_behind):
        annotations = (pod.get("metadata") or {}).get("annotations")
        if not annotations:
            continue
        for uuid, mib, cores in allocated_devices(annotations):
            before = used.get((node, uuid), (0, 0))
            used[(node, uuid)] = (before[0] + mib, before[1] + cores)
    return used


def _pod_gpu_requests(pod: dict[str, Any]) -> dict[str, int]:
    """GPU resources a pod holds: per container max(request, limit), init containers' peak."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        out: dict[str, int] = {}
        for section in ("limits", "requests"):
            for name, value in (resources.get(section) or {}).items():
                if name in SHARED_MEMORY_RESOURCES:  # MiB of a device: a shared row's GiB
                    out[name] = max(out.get(name, 0), math.ceil(quantity(value) / 1024))
                elif is_gpu_resource(name):
                    out[name] = max(out.get(name, 0), quantity(value))
        return out

    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for name, count in of(container).items():
            total[name] += count
    for container in spec.get("initContainers") or []:
        for name, count in of(container).items():
            total[name] = max(total[name], count)
    return dict(total)


def _is_portal_pod(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(volcano.LABEL_MANAGED_BY) == volcano.MANAGED_BY and bool(
        labels.get(volcano.LABEL_JOB_ID)
    )


def foreign_pods(
    pods: Iterable[dict[str, Any]], left_behind: Collection[str] = ()
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(node, pod) for every bound, unfinished pod the portal did not create, and the portal's
    own pods whose uid is in ``left_behind`` (no job's books count them): what the node has
    given away beyond the portal's books."""
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        if _is_portal_pod(pod) and _uid(pod) not in left_behind:
            continue
        yield str(node), pod


def foreign_gpu_use(
    pods: Iterable[dict[str, Any]], left_behind: Collection[str] = ()
) -> dict[tuple[str, str], int]:
    """GPUs per (node, resource) held by bound, unfinished pods the portal did not create, and
    by the portal's own pods whose uid is in ``left_behind`` (no job's books count them)."""
    used: dict[tuple[str, str], int] = defaultdict(int)
    for node, pod in foreign_pods(pods, left_behind):
        for resource, count in _pod_gpu_requests(pod).items():
            used[(node, resource)] += count
    return dict(used)


def _pod_host_requests(pod: dict[str, Any]) -> tuple[int, int]:
    """(milli-CPU, MiB) a pod asks the node for, as the scheduler counts it: the containers'
    requests summed (a limit alone counts as the request), the init containers' peak."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> tuple[int, int]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return _milli(asked.get("cpu")), _mib(asked.get("memory"))

    running = [of(c) for c in spec.get("containers") or []]
    cpu, mem = sum(c for c, _ in running), sum(m for _, m in running)
    for c, m in (of(c) for c in spec.get("initContainers") or []):
        cpu, mem = max(cpu, c), max(mem, m)
    return cpu, mem


def _milli(value: Any) -> int:
    try:
        return math.ceil(parse_quantity(value) * 1000) if value is not None else 0
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _mib(value: Any) -> int:
    try:
        return math.ceil(parse_quantity(value) / (1 << 20)) if value is not None else 0
    except (ValueError, TypeError, ArithmeticError):
        return 0


def foreign_host_use(
    pods: Iterable[dict[str, Any]], left_behind: Collection[str] = ()
) -> dict[str, tuple[int, int]]:
    """(milli-CPU, MiB) per node requested by the pods :func:`foreign_gpu_use` counts: what the
    portal's books of its own jobs do not hold, so the snapshot takes it off the node."""
    used: dict[str, tuple[int, int]] = {}
    for node, pod in foreign_pods(pods, left_behind):
        cpu, mem = _pod_host_requests(pod)
        had_cpu, had_mem = used.get(node, (0, 0))
        used[node] = (had_cpu + cpu, had_mem + mem)
    return used


def host_free(
    allocatable: Mapping[str, Any], used: tuple[int, int]
) -> tuple[int | None, int | None]:
    cpu = allocatable.get("cpu")
    mem = allocatable.get("memory")
    return (
        max(0, _milli(cpu) - used[0]) if cpu is not None else None,
        max(0, _mib(mem) - used[1]) if mem is not None else None,
    )


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def portal_pods_left_behind(pods: Iterable[dict[str, Any]]) -> set[str]:
    """UIDs of the portal's bound pods being deleted that no job's books count any more: the
    pods of a run whose stop ended without them, Terminating on a node that was unreachable
    (``clusters.teardown``). When the node comes back they hold their GPUs until its kubelet
    has stopped them (up to their grace period), so the books count them as used by others;
    counted free, a job placed there would wait for them, Pending."""
    dying: dict[str, tuple[Any, int | None]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp") or not (pod.get("spec") or {}).get("nodeName"):
            continue
        labels = meta.get("labels") or {}
        if (job_uuid := job_uuid_of(labels)) is not None and _uid(pod):
            dying[_uid(pod)] = (job_uuid, volcano.attempt_of(labels))
    if not dying:
        return set()
    holding = dict(
        Job.objects.filter(
            public_id__in={u for u, _ in dying.values()}, state__in=HOLDING_STATES
        ).values_list("public_id", "attempt_number")
    )
    return {
        uid
        for uid, (job_uuid, attempt) in dying.items()
        if job_uuid not in holding or attempt not in (None, holding[job_uuid])
    }
