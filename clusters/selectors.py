"""Read-only queries over clusters and their inventory, for pages, the API and the scheduler."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Max, Q, QuerySet

from clusters.models import Cluster, ClusterState, Node
from portal.access import AnyUser
from portal.models import HOLDING_STATES, Job
from rules.capacity import (
    NodeLoad,
    device_books,
    planned_gpus_by_node,
    pool_capacity,
    pool_free,
)

__all__ = [
    "DeviceUsage",
    "ModelCapacity",
    "cluster_capacity",
    "cluster_get",
    "clusters_visible_to",
    "device_usage",
    "largest_node_gpus",
]


def clusters_visible_to(user: AnyUser) -> QuerySet[Cluster]:
    """Every logged-in user sees which clusters exist (safe fields only; views choose which)."""
    if not user.is_authenticated:
        return Cluster.objects.none()
    return Cluster.objects.all()


def cluster_get(*, name: str) -> Cluster | None:
    return Cluster.objects.filter(name=name).first()


def largest_node_gpus() -> int | None:
    """The most GPUs (of one resource) any ready, schedulable node of an enabled cluster has.

    A replica must fit on one node, so submit validation refuses ``gpus_per_replica`` above
    this; None while no inventory has been read yet (then the setting's bound applies).
    """
    value = (
        Node.objects.filter(cluster__state=ClusterState.ENABLED, ready=True, schedulable=True)
        .exclude(gpu_model__shares__isnull=False)  # shared pools count GiB, not GPUs
        .aggregate(most=Max("gpu_allocatable"))["most"]
    )
    return int(value) if value else None


@dataclass
class ModelCapacity:
    """One GPU model on one cluster, as the scheduler sees it."""

    model: str
    """Catalog key, or ``unknown: <product>`` for a product the catalog does not know."""
    known: bool
    nodes: int = 0
    total: int = 0
    allocatable: int = 0
    used_by_others: int = 0
    planned: int = 0
    unusable: int = 0
    """GPUs left on nodes that are not Ready or cordoned: not free, whatever they hold."""
    free: int = 0
    """The sum over Ready, schedulable nodes of what each has left, by the capacity rule the
    cycle uses: a node counted beyond what it allocates has its excess taken off the others."""
    largest_free_block: int = 0
    node_rows: list[Node] = field(default_factory=list)
    shared: bool = False
    """A shared GPU pool: every figure is GiB of GPU memory, not GPUs."""
    over_counts: list[str] = field(default_factory=list)
    """Nodes whose books count more GPUs than they allocate, in words (normally none)."""
    largest_device_free: int = 0
    """A shared pool: the most GiB free on one device, what one share can get."""


def cluster_capacity(cluster: Cluster) -> list[ModelCapacity]:
    """Capacity per GPU model on ``cluster``: total, allocatable, in use, largest free block.

    Free GPUs come from the one capacity rule (:mod:`rules.capacity`), exactly as the
    scheduler counts them: foreign pods and the portal's own jobs by their node plans; a node
    that is not Ready or not schedulable contributes nothing free. The largest free block is
    the most GPUs free on a single node, what one gang replica can get.
    """
    holding = list(
        Job.objects.filter(cluster=cluster, state__in=HOLDING_STATES)
        .order_by("admitted_at", "pk")
        .values_list(
            "node_plan", "gpus_per_replica", "gpu_model_id", "device_plan", "gpu_cores_percent"
        )
    )
    planned = planned_gpus_by_node(
        (cluster.pk, plan, gpus, model) for plan, gpus, model, *_ in holding
    )
    # Shares by (node, model): GiB and the device each replica is booked on, oldest first.
    shares: dict[tuple[str, int | None], list[tuple[int, str, int]]] = defaultdict(list)
    for plan, gpus, model, devices, cores in holding:
        for replica, node_name in enumerate(plan or ()):
            device = devices[replica] if devices and replica < len(devices) else ""
            shares[(node_name, model)].append((gpus, str(device or ""), cores or 0))
    by_model: dict[str, ModelCapacity] = {}
    rows = Node.objects.filter(cluster=cluster).select_related("gpu_model").order_by("name")
    for node in rows:
        key = node.gpu_model.key if node.gpu_model else f"unknown: {node.gpu_product or '?'}"
        entry = by_model.setdefault(
            key,
            ModelCapacity(
                model=key,
                known=node.gpu_model is not None,
                shared=node.gpu_model is not None and node.gpu_model.shares_id is not None,
            ),
        )
        entry.node_rows.append(node)
    for entry in by_model.values():
        loads = [
            NodeLoad(
                name=node.name,
                allocatable=node.gpu_allocatable,
                used_by_others=node.gpus_used_by_others,
                planned=planned.get((cluster.pk, node.name, node.gpu_model_id), 0)
                if node.gpu_model_id
                else 0,
                ready=node.ready,
                schedulable=node.schedulable,
            )
            for node in entry.node_rows
        ]
        frees, overs = pool_free(loads)
        entry.allocatable = pool_capacity(load.allocatable for load in loads)
        entry.over_counts = [o.message for o in overs]
        for node, load, free in zip(entry.node_rows, loads, frees, strict=True):
            entry.nodes += 1
            entry.total += node.gpu_capacity
            entry.used_by_others += load.used_by_others
            entry.planned += load.planned
            entry.unusable += free.out_of_service
            entry.free += free.free
            entry.largest_free_block = max(entry.largest_free_block, free.free)
            if entry.shared:
                node.device_usage = device_usage(node, shares[(node.name, node.gpu_model_id)])  # type: ignore[attr-defined]
                entry.largest_device_free = max(
                    [entry.largest_device_free, *(d.free for d in node.device_usage)]  # type: ignore[attr-defined]
                )
    return sorted(by_model.values(), key=lambda m: (not m.known, m.model))


@dataclass(frozen=True)
class DeviceUsage:
    """One device of a shared node, as the books hold it (GiB of GPU memory)."""

    name: str
    """Its UUID, or ``GPU <index>`` when the inventory knows none."""
    used: int
    total: int

    @property
    def free(self) -> int:
        return max(0, self.total - self.used)


def device_usage(node: Node, shares: list[tuple[int, str, int]]) -> list[DeviceUsage]:
    """Used / total GiB per device of a shared node row, by the cycle's own per-device books
    (:func:`rules.capacity.device_books`): foreign pods where their scheduler put them,
    each share on the device it is booked on."""
    size = int(node.gpu_model.memory_gib) if node.gpu_model is not None else 0
    free, ids, _cores = device_books(
        node.gpu_allocatable, size, node.gpus_used_by_others, shares, node.devices
    )
    rows = [d for d in node.devices or () if int(d.get("gib") or 0) > 0]
    totals = [int(d["gib"]) for d in rows] if rows else []
    if len(totals) != len(free):  # no inventory of the devices: equal ones, as the books
        count = len(free)
        each, extra = divmod(node.gpu_allocatable, count) if count else (0, 0)
        totals = [each + (1 if i < extra else 0) for i in range(count)]
    names = list(ids) if ids else [f"GPU {i}" for i in range(len(free))]
    return [
        DeviceUsage(name=name, used=total - left, total=total)
        for name, left, total in zip(names, free, totals, strict=True)
    ]


def clusters_with_gpu_summary(user: AnyUser) -> list[tuple[Cluster, dict[str, int]]]:
    """Each visible cluster with its allocatable GPUs per model (one query for the counts)."""
    clusters = list(clusters_visible_to(user))
    rows_by: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    rows = Node.objects.filter(cluster__in=clusters).values_list(
        "cluster_id", "gpu_model__key", "gpu_product", "gpu_allocatable"
    )
    for cluster_id, key, product, allocatable in rows:
        rows_by[cluster_id][key or f"unknown: {product or '?'}"].append(allocatable)
    counts = {
        cluster_id: {label: pool_capacity(gpus) for label, gpus in by_label.items()}
        for cluster_id, by_label in rows_by.items()
    }
    return [(c, dict(sorted(counts.get(c.pk, {}).items()))) for c in clusters]


def jobs_on_cluster(cluster: Cluster, *, states: tuple[str, ...] = HOLDING_STATES) -> QuerySet[Job]:
    return Job.objects.filter(cluster=cluster, state__in=states)


def nodes_needing_attention(cluster: Cluster) -> QuerySet[Node]:
    return Node.objects.filter(cluster=cluster).filter(
        Q(ready=False) | Q(schedulable=False) | Q(gpu_model__isnull=True)
    )
