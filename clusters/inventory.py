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
and tested on its own; reading one node (its model, a shared node's devices, its health) is
:mod:`clusters.nodes`, what other pods hold on it :mod:`clusters.foreign_use`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters.bindings import node_plans_apply, pod_bindings, pod_devices
from clusters.checkup import cluster_checkup
from clusters.clients import ClusterUnavailable, cluster_client
from clusters.foreign_use import (
    foreign_device_use,
    foreign_gpu_use,
    foreign_host_use,
    host_free,
    portal_pods_left_behind,
)
from clusters.kube import KubeError
from clusters.models import Cluster, Node
from clusters.nodes import (
    AMD_PRODUCT,
    GFD_PRODUCT,
    MIG_PREFIX,
    Catalog,
    is_gpu_resource,
    node_ready,
    node_schedulable,
    node_trouble,
    quantity,
    shared_device_rows,
    shared_memory_mib,
)
from rules.engine.sharing import memory_units

log = logging.getLogger(__name__)

__all__ = [
    "InventoryResult",
    "inventory_sync",
    "node_rows_from",
]


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
        resources = sorted({r for r in (*capacity, *allocatable) if is_gpu_resource(r)})
        if not resources and labels.get("nvidia.com/gpu.present") == "true":
            resources = ["nvidia.com/gpu"]  # a GPU node whose device plugin is not up (yet)
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        shared = shared_memory_mib(allocatable, annotations)
        if not name or (not resources and shared is None):
            continue
        parent = catalog.whole(labels, gpu_label)
        product = labels.get(GFD_PRODUCT) or labels.get(AMD_PRODUCT) or labels.get(gpu_label, "")
        mig = {r: quantity(allocatable.get(r, 0)) for r in resources if r.startswith(MIG_PREFIX)}
        ready = node_ready(node)
        schedulable = node_schedulable(node, tolerate_gpu_taint=tolerate_gpu_taint)
        taints = list((node.get("spec") or {}).get("taints") or [])
        # One node's CPU and memory, on each of its rows (a MIG node has a row per profile).
        cpu_free, memory_free = host_free(allocatable, host_used.get(name, (0, 0)))
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
                    capacity=quantity(capacity.get(resource, allocatable.get(resource, 0))),
                    allocatable=quantity(allocatable.get(resource, 0)),
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
