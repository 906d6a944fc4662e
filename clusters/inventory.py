"""The GPU inventory: a cluster's nodes read into :class:`clusters.models.Node` rows.

What the scheduler can place on a node is what the node can allocate, minus what pods the
portal did not create already use, minus the portal's own jobs (counted from their node plans
by the scheduler, not here). So a sync reads two lists, nodes and non-finished pods, and
rewrites the cluster's rows in one transaction:

* the GPU model comes from the cluster's label (``gpu-type`` by default, whose value is a
  catalog key), else from GPU Feature Discovery's ``nvidia.com/gpu.product`` mapped through
  the catalog's ``product_labels``; a product nobody knows is kept with ``gpu_model`` null and
  its raw label, so an admin sees it and can add it to the catalog;
* each MIG resource of the mixed strategy (``nvidia.com/mig-1g.10gb``) becomes a row of its
  own, mapped to the catalog's slice model of the node's GPU; under the single strategy the
  node's ``nvidia.com/gpu`` are slices, so only a slice model (from GFD's ``…-MIG-1g.10gb``
  product) may name them, never the card the cluster's label names;
* a shared-GPU node (Volcano vGPU: allocatable ``volcano.sh/vgpu-memory``; HAMi: the
  ``hami.io/node-nvidia-register`` annotation) becomes one row of GiB of GPU memory, mapped to
  the catalog's shared pool of the node's card; its ``nvidia.com/gpu`` (HAMi advertises
  devices × split count there) is never also offered as whole GPUs;
* Ready comes from the node's Ready condition; schedulable is false when the node is cordoned
  or carries a NoSchedule/NoExecute taint that portal pods do not tolerate.

Pure parsing (:func:`node_rows_from`) is separate from the database write so it can be read
and tested on its own.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters.bindings import job_uuid_of, node_plans_apply, pod_bindings, pod_devices
from clusters.checkup import cluster_checkup
from clusters.clients import ClusterUnavailable, cluster_client
from clusters.devices import allocated_devices, registered_devices
from clusters.kube import KubeError, parse_quantity
from clusters.models import Cluster, Node
from portal.models import HOLDING_STATES, Job
from rules import volcano
from rules.engine.sharing import memory_units
from scheduling.models import GpuModel

log = logging.getLogger(__name__)

__all__ = [
    "Catalog",
    "InventoryResult",
    "hami_devices",
    "inventory_sync",
    "node_ready",
    "node_rows_from",
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


@dataclass
class NodeRow:
    """One (node, GPU resource) as the inventory will store it."""

    name: str
    gpu_resource: str
    model_pk: int | None
    gpu_product: str
    capacity: int
    allocatable: int
    used_by_others: int
    mig_resources: dict[str, int]
    ready: bool
    schedulable: bool
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    devices: list[dict[str, Any]] = field(default_factory=list)
    """A shared node's devices, in order: ``{"id": UUID, "gib": GiB, "others": GiB held by
    pods the portal did not create}`` (:func:`shared_device_rows`); empty otherwise."""
    cpu_free: int | None = None
    """Milli-CPU the node allocates minus what foreign pods request (:func:`foreign_host_use`);
    None when the node reports no CPU."""
    memory_free: int | None = None
    """MiB of memory the node allocates minus what foreign pods request; None when unknown."""


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


def hami_devices(annotation: str) -> list[tuple[int, int]]:
    """(memory MiB, split count) per device from HAMi's node registration annotation.

    Two encodings exist: the JSON list of newer releases (``[{"id": …, "count": 10,
    "devmem": 81920, "devcore": 100, "type": "NVIDIA-…", "health": true}, …]``) and the older
    ``id,count,devmem,devcore,type,numa,health:`` records separated by colons. Unhealthy or
    unreadable devices are left out.
    """
    text = (annotation or "").strip()
    devices: list[tuple[int, int]] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("health", True) is not False:
                devices.append((_count(item.get("devmem")), _count(item.get("count"))))
        return [d for d in devices if d[0]]
    for record in text.split(":"):
        parts = record.split(",")
        if len(parts) < 4 or (len(parts) >= 7 and parts[6].strip().lower() == "false"):
            continue
        devices.append((_count(parts[2]), _count(parts[1])))
    return [d for d in devices if d[0]]


def shared_memory_mib(
    allocatable: Mapping[str, Any], annotations: Mapping[str, str]
) -> tuple[str, int] | None:
    """(resource, device memory in MiB on the node) when the node shares its GPUs, else None:
    Volcano vGPU from allocatable ``volcano.sh/vgpu-memory``, HAMi from its registration."""
    if VGPU_MEMORY in allocatable or VGPU_NUMBER in allocatable:
        return VGPU_MEMORY, _count(allocatable.get(VGPU_MEMORY, 0))
    register = annotations.get(HAMI_REGISTER)
    if register:
        return HAMI_MEMORY, sum(mem for mem, _ in hami_devices(register))
    return None


def _count(value: Any) -> int:
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


def _is_gpu_resource(name: str) -> bool:
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


def _pod_gpu_requests(pod: dict[str, Any]) -> dict[str, int]:
    """GPU resources a pod holds: per container max(request, limit), init containers' peak."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        out: dict[str, int] = {}
        for section in ("limits", "requests"):
            for name, value in (resources.get(section) or {}).items():
                if name in SHARED_MEMORY_RESOURCES:  # MiB of a device: a shared row's GiB
                    out[name] = max(out.get(name, 0), math.ceil(_count(value) / 1024))
                elif _is_gpu_resource(name):
                    out[name] = max(out.get(name, 0), _count(value))
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


def _host_free(
    allocatable: Mapping[str, Any], used: tuple[int, int]
) -> tuple[int | None, int | None]:
    cpu = allocatable.get("cpu")
    mem = allocatable.get("memory")
    return (
        max(0, _milli(cpu) - used[0]) if cpu is not None else None,
        max(0, _mib(mem) - used[1]) if mem is not None else None,
    )


def node_rows_from(
    nodes: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    *,
    catalog: Catalog,
    gpu_label: str,
    tolerate_gpu_taint: bool = True,
    left_behind: Collection[str] = (),
) -> list[NodeRow]:
    """Rows for every GPU resource of every node (nodes without GPUs are left out);
    ``left_behind``: uids of portal pods counted as another's use (see
    :func:`portal_pods_left_behind`)."""
    pods = list(pods)
    used = foreign_gpu_use(pods, left_behind)
    used_devices = foreign_device_use(pods, left_behind)
    host_used = foreign_host_use(pods, left_behind)
    rows: list[NodeRow] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        name = str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        capacity = status.get("capacity") or {}
        allocatable = status.get("allocatable") or {}
        resources = sorted({r for r in (*capacity, *allocatable) if _is_gpu_resource(r)})
        if not resources and labels.get("nvidia.com/gpu.present") == "true":
            resources = ["nvidia.com/gpu"]  # a GPU node whose device plugin is not up (yet)
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        shared = shared_memory_mib(allocatable, annotations)
        if not name or (not resources and shared is None):
            continue
        parent = catalog.whole(labels, gpu_label)
        product = labels.get(GFD_PRODUCT) or labels.get(AMD_PRODUCT) or labels.get(gpu_label, "")
        mig = {r: _count(allocatable.get(r, 0)) for r in resources if r.startswith(MIG_PREFIX)}
        ready = node_ready(node)
        schedulable = node_schedulable(node, tolerate_gpu_taint=tolerate_gpu_taint)
        taints = list((node.get("spec") or {}).get("taints") or [])
        # One node's CPU and memory, on each of its rows (a MIG node has a row per profile).
        cpu_free, memory_free = _host_free(allocatable, host_used.get(name, (0, 0)))
        if shared is not None:
            # The node's devices are split between pods: one row of GiB, and no whole GPUs.
            resource, mib = shared
            model = catalog.shared_of.get(parent.key) if parent is not None else None
            gib = memory_units(mib)
            rows.append(
                NodeRow(
                    name=name,
                    gpu_resource=resource,
                    model_pk=model.pk if model else None,
                    gpu_product=f"{product} shared"[:253],
                    capacity=gib,
                    allocatable=gib,
                    used_by_others=used.get((name, resource), 0),
                    mig_resources={},
                    ready=ready,
                    schedulable=schedulable,
                    labels=labels,
                    taints=taints,
                    devices=shared_device_rows(name, annotations, used_devices),
                    cpu_free=cpu_free,
                    memory_free=memory_free,
                )
            )
            continue
        for resource in resources:
            is_mig = resource.startswith(MIG_PREFIX)
            model = catalog.slice(resource, parent, product) if is_mig else parent
            shown = f"{product} MIG {resource.removeprefix(MIG_PREFIX)}" if is_mig else product
            rows.append(
                NodeRow(
                    name=name,
                    gpu_resource=resource,
                    model_pk=model.pk if model else None,
                    gpu_product=shown[:253],
                    capacity=_count(capacity.get(resource, allocatable.get(resource, 0))),
                    allocatable=_count(allocatable.get(resource, 0)),
                    used_by_others=used.get((name, resource), 0),
                    mig_resources=mig,
                    ready=ready,
                    schedulable=schedulable,
                    labels=labels,
                    taints=taints,
                    cpu_free=cpu_free,
                    memory_free=memory_free,
                )
            )
    return rows


@dataclass
class InventoryResult:
    ok: bool
    message: str
    nodes: int = 0
    rows: int = 0
    unknown: int = 0
    removed: int = 0
    troubled: dict[str, str] = field(default_factory=dict)
    """GPU node → why a replica can no longer run there (:func:`node_trouble`): the caller
    moves the jobs planned there (``clusters.node_failure``), the backstop of the nodes
    watch."""


_FIELDS = (
    "gpu_model_id",
    "gpu_product",
    "gpu_capacity",
    "gpu_allocatable",
    "gpus_used_by_others",
    "mig_resources",
    "devices",
    "cpu_free_millicores",
    "memory_free_mib",
    "ready",
    "schedulable",
    "labels",
    "taints",
    "last_seen_at",
)


def _store(cluster: Cluster, rows: list[NodeRow]) -> int:
    """Upsert the rows and delete the cluster's rows that were not seen; returns removed."""
    now = timezone.now()
    objs = [
        Node(
            cluster=cluster,
            name=r.name,
            gpu_resource=r.gpu_resource,
            gpu_model_id=r.model_pk,
            gpu_product=r.gpu_product,
            gpu_capacity=r.capacity,
            gpu_allocatable=r.allocatable,
            gpus_used_by_others=r.used_by_others,
            mig_resources=r.mig_resources,
            devices=r.devices,
            cpu_free_millicores=r.cpu_free,
            memory_free_mib=r.memory_free,
            ready=r.ready,
            schedulable=r.schedulable,
            labels=r.labels,
            taints=r.taints,
            last_seen_at=now,
        )
        for r in rows
    ]
    seen = {(r.name, r.gpu_resource) for r in rows}
    with transaction.atomic():
        Node.objects.bulk_create(
            objs,
            update_conflicts=True,
            unique_fields=["cluster", "name", "gpu_resource"],
            update_fields=list(_FIELDS),
            batch_size=500,
        )
        stale = [
            pk
            for pk, name, resource in Node.objects.filter(cluster=cluster).values_list(
                "pk", "name", "gpu_resource"
            )
            if (name, resource) not in seen
        ]
        if stale:
            Node.objects.filter(pk__in=stale).delete()
        Cluster.objects.filter(pk=cluster.pk).update(inventory_synced_at=now, inventory_error="")
    return len(stale)


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


def inventory_sync(*, cluster: Cluster) -> InventoryResult:
    """Read the cluster's nodes and pods and rewrite its Node rows; errors are recorded, and
    the rows from the last good sync are kept (the scheduler goes on with what it knew)."""
    try:
        client = cluster_client(cluster)
        nodes = client.list_nodes()
        pods = client.list_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
    except (ClusterUnavailable, KubeError) as exc:
        message = exc.message if isinstance(exc, KubeError) else str(exc)
        Cluster.objects.filter(pk=cluster.pk).update(inventory_error=message[:2000])
        log.warning("inventory of %s failed: %s", cluster.name, message)
        return InventoryResult(ok=False, message=message)
    rows = node_rows_from(
        nodes,
        pods,
        catalog=Catalog.load(),
        gpu_label=cluster.gpu_label,
        tolerate_gpu_taint=cluster.tolerate_gpu_taint,
        left_behind=portal_pods_left_behind(pods),
    )
    removed = _store(cluster, rows)
    # The same list says where every portal replica runs: plans that drifted are corrected
    # here too, all in one pass, whether or not the watcher and the reconcile caught them.
    node_plans_apply(pod_bindings(pods), cluster_id=cluster.pk, devices=pod_devices(pods))
    # The cluster doctor reads the same node list. Its own trouble is logged, never the sync's:
    # the scheduler needs the rows above whatever the doctor makes of them.
    try:
        cluster_checkup(cluster=cluster, client=client, nodes=nodes)
    except Exception:
        log.exception("cluster doctor failed on %s; the inventory stands", cluster.name)
    unknown = sum(1 for r in rows if r.model_pk is None)
    gpu_nodes = len({r.name for r in rows})
    troubled = {
        name: trouble
        for node in nodes
        if (name := str((node.get("metadata") or {}).get("name") or ""))
        and (trouble := node_trouble(node, tolerate_gpu_taint=cluster.tolerate_gpu_taint))
    }
    message = f"{gpu_nodes} GPU nodes ({len(rows)} GPU resources, {unknown} unknown products)"
    return InventoryResult(
        ok=True,
        message=message,
        nodes=gpu_nodes,
        rows=len(rows),
        unknown=unknown,
        removed=removed,
        troubled=troubled,
    )
