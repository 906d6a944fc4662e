"""Reading nodes: a node object as the API server returns it, reduced to what the rules ask
(its GPUs by resource, its labels, whether it is ready and new), and the words that name them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusters.doctor.facts import (
    AMD_PRODUCT,
    GFD_PRODUCT,
    GPU_COUNT,
    GPU_PRESENT,
    MAX_NODES_NAMED,
    MIG_PREFIX,
    SHARED_GPU_RESOURCES,
    WHOLE_GPU_RESOURCES,
)


def _count(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def _is_gpu_resource(name: str) -> bool:
    return (
        name in WHOLE_GPU_RESOURCES or name in SHARED_GPU_RESOURCES or name.startswith(MIG_PREFIX)
    )


@dataclass(frozen=True)
class _Node:
    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    shared: bool
    created: dt.datetime | None = None
    ready: bool | None = None
    """The Ready condition's status (None: the node has no Ready condition to go by)."""

    def starting(self, now: dt.datetime | None, grace: dt.timedelta) -> str:
        """Why the node is not expected to have its GPUs running yet ("" when it is): it joined
        less than ``grace`` ago, or it is NotReady (its kubelet, and so the device plugin and
        exporter pods, are not running or not reporting)."""
        if self.ready is False:
            return "NotReady"
        if now is not None and self.created is not None and now - self.created < grace:
            minutes = max(0, int((now - self.created).total_seconds() // 60))
            return f"joined {minutes} min ago"
        return ""

    @property
    def product(self) -> str:
        return self.labels.get(GFD_PRODUCT) or self.labels.get(AMD_PRODUCT) or ""

    @property
    def gpus_allocatable(self) -> int:
        return sum(v for r, v in self.allocatable.items() if _is_gpu_resource(r))

    @property
    def gpus_capacity(self) -> int:
        return sum(v for r, v in self.capacity.items() if _is_gpu_resource(r))

    @property
    def mig_allocatable(self) -> dict[str, int]:
        return {r: v for r, v in self.allocatable.items() if r.startswith(MIG_PREFIX) and v}

    @property
    def mig_single(self) -> bool:
        """GFD's product names a MIG slice: strategy single with MIG on (``…-MIG-1g.10gb``)."""
        return "-MIG-" in self.product


def _created(value: Any) -> dt.datetime | None:
    """metadata.creationTimestamp (RFC 3339 text, or a datetime from a typed client)."""
    if isinstance(value, dt.datetime):
        created = value
    else:
        try:
            created = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return created if created.tzinfo else created.replace(tzinfo=dt.UTC)


def _ready(status: Mapping[str, Any]) -> bool | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return None


def _gpu_nodes(nodes: Iterable[Mapping[str, Any]], gpu_label: str) -> list[_Node]:
    """The nodes that have GPUs or say they should: a GPU resource in capacity or allocatable,
    GPU Feature Discovery's product, count or presence labels, or the cluster's model label."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        name = str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        capacity = {str(k): _count(v) for k, v in (status.get("capacity") or {}).items()}
        allocatable = {str(k): _count(v) for k, v in (status.get("allocatable") or {}).items()}
        annotations = meta.get("annotations") or {}
        has_resource = any(_is_gpu_resource(r) for r in (*capacity, *allocatable))
        says_gpu = (
            labels.get(GPU_PRESENT) == "true"
            or bool(labels.get(GFD_PRODUCT) or labels.get(AMD_PRODUCT))
            or _count(labels.get(GPU_COUNT)) > 0
            or bool(gpu_label and labels.get(gpu_label))
        )
        if not name or not (has_resource or says_gpu):
            continue
        shared = "volcano.sh/vgpu-memory" in allocatable or "hami.io/node-nvidia-register" in (
            annotations
        )
        created = _created(meta.get("creationTimestamp"))
        out.append(_Node(name, labels, capacity, allocatable, shared, created, _ready(status)))
    return sorted(out, key=lambda n: n.name)


def _named(nodes: Sequence[str]) -> str:
    """``a100-0, a100-1`` or ``a100-0, … and 38 more``."""
    shown = ", ".join(nodes[:MAX_NODES_NAMED])
    rest = len(nodes) - MAX_NODES_NAMED
    return f"{shown} and {rest} more" if rest > 0 else shown


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _verb(count: int, singular: str, plural: str) -> str:
    return singular if count == 1 else plural
