"""Reading one Kubernetes node for the inventory (:mod:`clusters.inventory`): which catalog
model its GPUs are (:class:`Catalog`, from the cluster's label or GPU Feature Discovery's), the
devices and GiB a shared node registered (Volcano vGPU, HAMi), and whether it is Ready,
schedulable, or in trouble."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clusters.devices import registered_devices, registration_records
from rules.engine.sharing import memory_units
from scheduling.models import GpuModel

__all__ = [
    "Catalog",
    "hami_devices",
    "node_ready",
    "node_schedulable",
    "node_trouble",
    "shared_memory_mib",
]

WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MIG_PREFIX = "nvidia.com/mig-"
GFD_PRODUCT = "nvidia.com/gpu.product"
AMD_PRODUCT = "amd.com/gpu.product-name"
GPU_TAINT = "nvidia.com/gpu"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_REGISTER = "hami.io/node-nvidia-register"
SHARED_MEMORY_RESOURCES = (VGPU_MEMORY, HAMI_MEMORY)
"""Pod resources in MiB of device memory; a shared pool row counts them in whole GiB."""
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class CatalogEntry:
    pk: int
    key: str
    resource_name: str


@dataclass
class Catalog:
    """The GPU model catalog, indexed the ways node labels name a model."""

    by_key: dict[str, CatalogEntry] = field(default_factory=dict)
    by_product: dict[str, CatalogEntry] = field(default_factory=dict)
    by_resource: dict[str, list[CatalogEntry]] = field(default_factory=dict)
    shared_of: dict[str, CatalogEntry] = field(default_factory=dict)
    """Card key → the catalog's shared pool of that card."""

    @classmethod
    def load(cls) -> Catalog:
        catalog = cls()
        for pk, key, labels, resource, shares in GpuModel.objects.values_list(
            "pk", "key", "product_labels", "resource_name", "shares__key"
        ):
            entry = CatalogEntry(pk, key, resource)
            if shares:  # a shared pool is named by its card's nodes, never by labels of its own
                catalog.shared_of.setdefault(shares, entry)
                continue
            catalog.by_key[key.lower()] = entry
            for label in labels or []:
                catalog.by_product.setdefault(str(label).lower(), entry)
            catalog.by_resource.setdefault(resource, []).append(entry)
        return catalog

    def whole(self, labels: Mapping[str, str], gpu_label: str) -> CatalogEntry | None:
        """The model of the node's ``nvidia.com/gpu``: the cluster's label first, GFD's product
        second; on a MIG "single" node, a slice model only."""
        value = labels.get(gpu_label)
        product = labels.get(GFD_PRODUCT) or labels.get(AMD_PRODUCT)
        single = _mig_single(product or "")
        if value:
            entry = self.by_key.get(value.lower()) or self.by_product.get(value.lower())
            # The cluster's label is set per node pool and names the card; partitioning the
            # GPUs does not change it, so on a MIG single node it only counts if it names a
            # slice model. Otherwise 10 GB slices would pass for whole 80 GB GPUs.
            if entry is not None and (not single or entry.resource_name.startswith(MIG_PREFIX)):
                return entry
        if product:
            return self.by_product.get(product.lower())
        return None

    def slice(
        self, resource: str, parent: CatalogEntry | None, product: str
    ) -> CatalogEntry | None:
        """The catalog model of a MIG resource on a node whose whole GPUs are ``parent``."""
        profile = resource.removeprefix(MIG_PREFIX)
        candidates = self.by_resource.get(resource, [])
        if parent is not None:
            for entry in candidates:
                if entry.key.startswith(f"{parent.key}-mig-"):
                    return entry
        if product:
            return self.by_product.get(f"{product}-MIG-{profile}".lower())
        return None


def shared_device_rows(
    node: str, annotations: Mapping[str, str], others: Mapping[tuple[str, str], tuple[int, int]]
) -> list[dict[str, Any]]:
    """The devices a shared node registered (``clusters.devices``): UUID, GiB, compute %, and
    what foreign pods hold on each (``others``: (MiB, compute %) per (node, device UUID),
    :func:`foreign_device_use`)."""
    rows = []
    for uuid, mib, cores in registered_devices(annotations):
        used_mib, used_cores = others.get((node, uuid), (0, 0))
        rows.append(
            {
                "id": uuid,
                "gib": memory_units(mib),
                "cores": cores,
                "others": math.ceil(used_mib / 1024),
                "others_cores": used_cores,
            }
        )
    return rows


def hami_devices(annotation: str) -> list[tuple[int, int]]:
    """(memory MiB, split count) per healthy device of HAMi's node registration annotation
    (either encoding: ``clusters.devices.registration_records``)."""
    return [(mib, count) for _, count, mib, _ in registration_records(annotation or "")]


def shared_memory_mib(
    allocatable: Mapping[str, Any], annotations: Mapping[str, str]
) -> tuple[str, int] | None:
    """(resource, device memory in MiB on the node) when the node shares its GPUs, else None:
    Volcano vGPU from allocatable ``volcano.sh/vgpu-memory``, HAMi from its registration."""
    if VGPU_MEMORY in allocatable or VGPU_NUMBER in allocatable:
        return VGPU_MEMORY, quantity(allocatable.get(VGPU_MEMORY, 0))
    register = annotations.get(HAMI_REGISTER)
    if register:
        return HAMI_MEMORY, sum(mem for mem, _ in hami_devices(register))
    return None


def quantity(value: Any) -> int:
    """A GPU quantity (always whole numbers; "8", 8)."""
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def _mig_single(product: str) -> bool:
    """MIG strategy "single" with MIG on: every GPU is cut into one profile and each slice is
    advertised as ``nvidia.com/gpu``; GFD then appends the profile to the product label.

    GFD writes ``nvidia.com/mig.strategy`` on every node of a cluster configured for it,
    GPUs with MIG off included, so that label alone says nothing about this node's GPUs.
    """
    return "-MIG-" in product


def is_gpu_resource(name: str) -> bool:
    return name in WHOLE_GPU_RESOURCES or name.startswith(MIG_PREFIX)


def node_ready(node: Mapping[str, Any]) -> bool:
    """Whether the node's Ready condition is True (False for NotReady and for Unknown, the
    kubelet silent)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_schedulable(node: Mapping[str, Any], *, tolerate_gpu_taint: bool) -> bool:
    """Whether the scheduler may place new replicas here: not cordoned, and no NoSchedule or
    NoExecute taint the portal's pods do not tolerate."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in BLOCKING_EFFECTS:
            continue
        if tolerate_gpu_taint and taint.get("key") == GPU_TAINT:
            continue
        return False
    return True


def node_trouble(node: Mapping[str, Any], *, tolerate_gpu_taint: bool = True) -> str:
    """Why a portal replica can no longer run on ``node``, or "" when it can
    (``clusters.node_failure`` moves the jobs off such a node).

    Its Ready condition is not True (NotReady, or Unknown when the kubelet stopped reporting),
    or it carries a ``NoExecute`` taint the portal's pods do not tolerate (the node lifecycle
    controller's ``node.kubernetes.io/unreachable``). A cordon (``spec.unschedulable``) or a
    ``NoSchedule`` taint alone is not trouble: it keeps new pods away and evicts nothing, and
    an admin cordons a node precisely so that its jobs may finish before maintenance. Such a
    node is only left out of new placements (:func:`node_schedulable`); a job planned there
    moves once its pods are evicted and its gang restarts
    (``clusters.node_failure.restarting_job_replan``).
    """
    spec = node.get("spec") or {}
    if not node_ready(node):
        return "is NotReady"
    for taint in spec.get("taints") or []:
        if taint.get("effect") != "NoExecute":
            continue
        if tolerate_gpu_taint and taint.get("key") == GPU_TAINT:
            continue
        return f"has the taint {taint.get('key')}:NoExecute"
    return ""
