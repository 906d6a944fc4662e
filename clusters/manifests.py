"""The manifest input: from an admitted job and its cluster's node rows to the Volcano Job
the cluster is asked to create (``rules.volcano`` builds it, purely).

Which nodes a job may land on is said by labels when a label tells the model's nodes apart,
by hostnames otherwise (see :func:`_node_labels`); replicas are pinned where the cycle planned
them. The submission UID ties the object to one admission of the job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from clusters.clients import cluster_job_namespace
from clusters.models import Cluster, Node
from clusters.nodes import AMD_PRODUCT, GFD_PRODUCT, GPU_TAINT
from portal.models import Job
from rules import volcano
from scheduling.preemption_rules import termination_grace_seconds

__all__ = ["HOSTNAME_LABEL", "job_manifest", "submission_uid"]


def submission_uid(job: Job) -> str:
    """The UID written on the Volcano Job: one per (job, admission).

    A requeued job is admitted again with a new ``admitted_at``, so an object that survived
    from its earlier run never looks like this run's.
    """
    admitted = job.admitted_at.isoformat() if job.admitted_at else "-"
    return str(uuid.uuid5(job.public_id, f"gpupool-admission:{admitted}"))


_NODES_TTL = 30.0
_PRODUCT_LABELS = (GFD_PRODUCT, AMD_PRODUCT)
HOSTNAME_LABEL = volcano.HOSTNAME_LABEL


_Selector = tuple[dict[str, str], dict[str, list[str]]]
"""(nodeSelector, labels that may take several values): see :func:`_node_labels`."""
_SELECTORS_AT_MOST = 4096


@dataclass(frozen=True)
class _ClusterNodes:
    """A cluster's GPU node rows as a dispatch needs them, cached for a few seconds per
    process: labels and resources change with the inventory, not per job."""

    loaded_at: float
    gpu_label: str
    by_model: dict[int | None, dict[str, Node]]
    # (GPU resource, label, value) → the models whose nodes carry that label and offer that
    # resource: a selector is only safe when this model is the only one.
    claims: dict[tuple[str, str, str], set[int | None]]
    selectors: dict[tuple[int | None, tuple[str, ...]], _Selector] = field(default_factory=dict)
    """:func:`_node_labels`' answers by (model, node names): they depend on nothing else this
    cache does not hold, and a burst of one model's jobs asks the same question each time
    (it walks every node of the model: a quarter of a dispatch's own CPU at 16 nodes)."""


_nodes_cache: dict[int | None, _ClusterNodes] = {}


def _cluster_nodes(cluster: Cluster, *, needed: Iterable[str] = ()) -> _ClusterNodes:
    """The cached rows, read again when older than a few seconds, when the cluster's label
    changed, or when a ``needed`` node (one the job was planned on) is not among them: the
    cycle may have planned on nodes an inventory sync added after this cache was filled."""
    cached = _nodes_cache.get(cluster.pk)
    if (
        cached is not None
        and time.monotonic() - cached.loaded_at <= _NODES_TTL
        and cached.gpu_label == cluster.gpu_label
        and all(any(name in nodes for nodes in cached.by_model.values()) for name in needed)
    ):
        return cached
    keys = (cluster.gpu_label, *_PRODUCT_LABELS)
    by_model: dict[int | None, dict[str, Node]] = {}
    claims: dict[tuple[str, str, str], set[int | None]] = {}
    rows = Node.objects.filter(cluster_id=cluster.pk).only(
        "name", "gpu_resource", "labels", "gpu_model_id"
    )
    for node in rows:
        by_model.setdefault(node.gpu_model_id, {})[node.name] = node
        labels = node.labels or {}
        for key in keys:
            if key in labels:
                for resource in _advertised(node.gpu_resource):
                    claims.setdefault((resource, key, str(labels[key])), set()).add(
                        node.gpu_model_id
                    )
    cached = _ClusterNodes(time.monotonic(), cluster.gpu_label, by_model, claims)
    _nodes_cache[cluster.pk] = cached
    return cached


def _advertised(resource: str) -> tuple[str, ...]:
    """The resources a node row's pods may ask for: a HAMi node counts GiB of ``gpumem`` but
    also advertises ``nvidia.com/gpu`` (devices x split count), so a whole-GPU job's label must
    not select it."""
    if resource == volcano.HAMI_MEMORY:
        return (resource, volcano.HAMI_GPU)
    return (resource,)


def _model_nodes(job: Job, nodes: _ClusterNodes) -> list[Node]:
    """The model's nodes on the job's cluster: the planned ones if the inventory has them."""
    mine = nodes.by_model.get(job.gpu_model_id, {})
    planned = [mine[name] for name in dict.fromkeys(job.node_plan or []) if name in mine]
    return planned or list(mine.values())


def _node_selector(
    cluster: Cluster, job: Job, nodes: list[Node], inventory: _ClusterNodes
) -> _Selector:
    """:func:`_node_labels`, remembered in the inventory cache (a copy: the builder's
    input must not share dicts between jobs)."""
    if not nodes:
        return _node_labels(cluster, job, nodes, inventory.claims)
    key = (job.gpu_model_id, tuple(n.name for n in nodes))
    found = inventory.selectors.get(key)
    if found is None:
        if len(inventory.selectors) >= _SELECTORS_AT_MOST:
            inventory.selectors.clear()
        found = inventory.selectors[key] = _node_labels(cluster, job, nodes, inventory.claims)
    selector, label_in = found
    return dict(selector), {k: list(v) for k, v in label_in.items()}


def _node_labels(
    cluster: Cluster, job: Job, nodes: list[Node], claims: dict[tuple[str, str, str], set[Any]]
) -> _Selector:
    """(nodeSelector, labels that may take several values) that select the model's nodes.

    A label is used only when every one of the nodes carries it and no node of another model
    offering the same GPU resource shares its value: a MIG-single node still labelled with its
    card (``gpu-type=a100-80gb``) must not pull a slice job onto whole A100s. One common value
    is a plain nodeSelector (the cluster's label first, then GPU Feature Discovery's product);
    failing that, a product spelled two ways across a driver upgrade becomes an ``In``
    affinity; when no label is safe, the nodes are named (``kubernetes.io/hostname In``).
    Without inventory, the cluster's label with the catalog key.
    """
    assert job.gpu_model is not None
    if not nodes:
        return {cluster.gpu_label: job.gpu_model.key}, {}
    keys = (cluster.gpu_label, *_PRODUCT_LABELS)
    resources = {n.gpu_resource for n in nodes}
    usable: dict[str, set[str]] = {}
    for key in keys:
        values = {(n.labels or {}).get(key) for n in nodes}
        if None in values:
            continue
        if all(
            claims.get((r, key, str(v)), set()) <= {job.gpu_model_id}
            for r in resources
            for v in values
        ):
            usable[key] = {str(v) for v in values}
    for key in keys:
        if len(usable.get(key, ())) == 1:
            return {key: next(iter(usable[key]))}, {}
    for key in keys:
        if key in usable:
            return {}, {key: sorted(usable[key])}
    # No label tells them apart from another model's nodes: name them.
    return {}, {HOSTNAME_LABEL: sorted({_hostname(n) for n in nodes})}


def _hostname(node: Node) -> str:
    return str((node.labels or {}).get(HOSTNAME_LABEL) or node.name)


def _replica_hosts(job: Job, nodes: list[Node]) -> list[str]:
    """The hostname planned for each replica, or nothing when the plan does not name a known
    node for every replica.

    The replicas are pinned there: the cycle reserved GPUs on those nodes and nowhere else,
    and Volcano, left free to choose among all the model's nodes, binds a burst of gangs in
    its own order and can split the room a later gang of the same burst was planned into.
    """
    by_name = {n.name: n for n in nodes}
    plan = list(job.node_plan or ())
    if len(plan) != job.replicas or not all(name in by_name for name in plan):
        return []
    return [_hostname(by_name[name]) for name in plan]


def _replica_devices(job: Job) -> list[str]:
    """The device planned for each replica of a share (UUIDs, as the cycle planned them), or
    nothing when the plan does not name a device for every replica: the cluster's scheduler
    then picks, and the reconcile reads back where."""
    plan = [str(d or "") for d in job.device_plan or ()]
    if job.gpu_memory_gib is None or len(plan) != job.replicas or not all(plan):
        return []
    # A device the inventory knew no UUID for is named by its index: not something to pin.
    if any(part.isdigit() for d in plan for part in d.split("+")):
        return []
    return plan


def job_manifest(job: Job) -> tuple[str, dict[str, Any]]:
    """(namespace, Volcano Job manifest) for an admitted job."""
    cluster, model = job.cluster, job.gpu_model
    assert cluster is not None and model is not None
    inventory = _cluster_nodes(cluster, needed=job.node_plan or ())
    nodes = _model_nodes(job, inventory)
    resource = nodes[0].gpu_resource if nodes else model.resource_name
    node_selector, node_label_in = _node_selector(cluster, job, nodes, inventory)
    namespace = cluster_job_namespace(cluster, job.team.slug)
    # No effect named: the GPU taint is tolerated whatever its effect, exactly what the
    # inventory assumes when it counts a node tainted nvidia.com/gpu as schedulable.
    tolerations = (volcano.Toleration(key=GPU_TAINT),) if cluster.tolerate_gpu_taint else ()
    spec = volcano.VolcanoJobSpec(
        job_id=str(job.public_id),
        display_name=job.name,
        team_slug=job.team.slug,
        namespace=namespace,
        queue=volcano.volcano_queue_name(job.team.slug),
        kind=job.kind,  # type: ignore[arg-type]
        image=job.image,
        command=list(job.command or []),
        args=list(job.args or []),
        env=dict(job.env or {}),
        env_from_secrets={
            name: volcano.SecretKeyRef(secret=ref["secret"], key=ref["key"])
            for name, ref in (job.env_from_secrets or {}).items()
        },
        replicas=job.replicas,
        gpus_per_replica=job.gpus_per_replica,
        gpu_resource=resource,
        gpu_model=model.key,
        node_selector=node_selector,
        node_label_in=node_label_in,
        replica_hosts=_replica_hosts(job, nodes),
        replica_devices=_replica_devices(job),
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        max_runtime_seconds=job.max_runtime_seconds,
        max_retry=job.max_retry,
        port=job.port,
        readiness_path=job.readiness_path or None,
        scheduler_name=cluster.scheduler_name,
        submission_uid=submission_uid(job),
        portal_url=f"{settings.SITE_URL.rstrip('/')}/jobs/{job.public_id}/",
        tolerations=tolerations,
        automount_service_account_token=cluster.mount_service_account_token,
        run_as_non_root=cluster.run_as_non_root,
        termination_grace_seconds=termination_grace_seconds(job.team),
        gpu_share=_gpu_share(cluster, job, resource),
        attempt=job.attempt_number,
    )
    return namespace, volcano.build_volcano_job(spec)


def _gpu_share(cluster: Cluster, job: Job, resource: str) -> volcano.GpuShare | None:
    """A shared-GPU job's share, in the cluster's sharing mode. On a cluster left at "no
    sharing" whose inventory still found shared nodes, the nodes' own kind decides: HAMi when
    they registered with HAMi (their row counts ``nvidia.com/gpumem``), else Volcano vGPU."""
    if job.gpu_memory_gib is None:
        return None
    mode = cluster.sharing_mode
    if mode not in (volcano.SHARING_VOLCANO_VGPU, volcano.SHARING_HAMI):
        hami = resource == volcano.HAMI_MEMORY
        mode = volcano.SHARING_HAMI if hami else volcano.SHARING_VOLCANO_VGPU
    return volcano.GpuShare(
        mode=mode, memory_mib=job.gpu_memory_gib * 1024, cores_percent=job.gpu_cores_percent
    )
