"""Where the replicas really run: pod bindings written over the scheduler's node plans.

The scheduler plans a node for each replica when it admits a job; Volcano binds the pods
where it finds room, which need not be the plan. The capacity rule counts a job's GPUs on the
nodes its ``node_plan`` names, so the plan must follow the bindings as soon as the cluster
reports them, whatever path reports them: a pod event on the watcher (even while the job is
still ADMITTED, between the create and the dispatcher's transition), the periodic reconcile,
or the inventory's list of every pod. Each path hands its bindings to :func:`node_plans_apply`,
which corrects every job it is given in one pass.

A binding is a fact: a pod's ``nodeName`` never changes. A replica whose pod is not bound (yet,
or again after a restart) keeps what its plan said, so a later, partial report can never undo
an earlier one, and the plan is read and written under the job's row lock, so two reporters
at once cannot either.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db import transaction

from clusters.clients import ClusterUnavailable, cluster_client
from clusters.devices import pod_device
from clusters.kube import KubeError
from clusters.models import Cluster
from portal.models import FOLLOWED_STATES, Job, JobState
from rules import volcano

log = logging.getLogger(__name__)

__all__ = [
    "FOLLOWED_STATES",
    "cluster_bindings_refresh",
    "job_uuid_of",
    "node_plans_apply",
    "pod_bindings",
    "pod_devices",
    "replica_of",
]

S = JobState


def job_uuid_of(labels: Mapping[str, Any]) -> uuid.UUID | None:
    """The portal job a cluster object belongs to, from its labels; None if not the portal's."""
    if labels.get(volcano.LABEL_MANAGED_BY) != volcano.MANAGED_BY:
        return None
    try:
        return uuid.UUID(str(labels.get(volcano.LABEL_JOB_ID)))
    except ValueError:
        return None


def replica_of(labels: Mapping[str, Any]) -> int | None:
    """The portal replica a pod runs, from Volcano's task labels; None if it cannot tell."""
    task, index = (
        labels.get(volcano.VOLCANO_LABEL_TASK_SPEC),
        labels.get(volcano.VOLCANO_LABEL_TASK_INDEX),
    )
    if task is None or not (str(index).isascii() and str(index).isdigit()):
        return None
    return volcano.replica_of_pod(str(task), int(str(index)))


def pod_bindings(pods: Iterable[dict[str, Any]]) -> dict[uuid.UUID, dict[int, str]]:
    """Portal job → replica → node, for every bound, live portal pod in ``pods`` (API
    objects), of the latest run seen for each job.

    A pod being deleted tells nothing new: its binding was a fact while it ran, and it may be
    an earlier run's, left Terminating on a node that died while the next run starts elsewhere
    under a Volcano Job of its own (``rules.volcano.volcano_job_name``); taken as a binding
    it would move the new run's plan back onto the dead node."""
    return _of_latest_runs(pods, lambda pod: str(pod["spec"]["nodeName"]))


def pod_devices(pods: Iterable[dict[str, Any]]) -> dict[uuid.UUID, dict[int, str]]:
    """Portal job → replica → the device its share landed on (``clusters.devices``), for the
    same pods as :func:`pod_bindings` (bound, live, of the latest run seen) that say so."""
    found = _of_latest_runs(pods, pod_device)
    return {u: d for u, d in found.items() if d}


def _of_latest_runs(
    pods: Iterable[dict[str, Any]], value: Callable[[dict[str, Any]], str | None]
) -> dict[uuid.UUID, dict[int, str]]:
    """Portal job → replica → ``value(pod)`` for its bound, live pods of the latest run seen
    (a pod of a later run drops what an earlier one said); a None value is left out."""
    out: dict[uuid.UUID, dict[int, str]] = defaultdict(dict)
    latest: dict[uuid.UUID, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        job_uuid = job_uuid_of(labels)
        replica = replica_of(labels)
        if job_uuid is None or replica is None:
            continue
        attempt = volcano.attempt_of(labels) or 0
        if attempt < latest.get(job_uuid, 0):
            continue
        if attempt > latest.get(job_uuid, 0):
            latest[job_uuid] = attempt
            out[job_uuid].clear()
        found = value(pod)
        if found:
            out[job_uuid][replica] = found
    return dict(out)


def _devices_with(
    devices: list[str],
    replicas: int,
    old_plan: list[str],
    new_plan: list[str],
    reported: Mapping[int, str],
) -> list[str]:
    """A share's device plan once the bindings are applied: the devices the pods report, and
    "" (unknown: the books then charge the replica as the cluster's policy would place it)
    for a replica that was bound on another node than planned without saying where. A job
    with no device plan and nothing reported (whole GPUs) keeps none."""
    if not devices and not reported:
        return devices
    new = [*devices[:replicas], *[""] * (replicas - len(devices))]
    for replica in range(replicas):
        before = old_plan[replica] if replica < len(old_plan) else ""
        if new_plan[replica] != before:
            new[replica] = ""
    for replica, device in reported.items():
        if 0 <= replica < replicas and device:
            new[replica] = device
    return new


def _plan_with(plan: list[str], replicas: int, bound: Mapping[int, str]) -> list[str]:
    new = [*plan[:replicas], *[""] * (replicas - len(plan))]
    for replica, node in bound.items():
        if 0 <= replica < replicas and node:
            new[replica] = node
    return new


def node_plans_apply(
    bindings: Mapping[uuid.UUID, Mapping[int, str]],
    *,
    cluster_id: int | None = None,
    devices: Mapping[uuid.UUID, Mapping[int, str]] | None = None,
) -> dict[int, list[str]]:
    """Write real bindings over the node plans of the jobs still holding GPUs, in one pass;
    with ``devices`` (:func:`pod_devices`), the devices shares landed on over their device
    plans too, so the books charge each share where it really is.

    Returns the plans that changed (job pk → new plan). Rows are locked in primary-key order,
    so concurrent reporters (watcher, reconcile, inventory) serialise without deadlock; jobs
    that no longer hold GPUs are left alone. With ``cluster_id``, only that cluster's jobs.
    The lock is the one the update takes anyway (``NO KEY UPDATE``, as ``portal.jobs.rowlock``):
    ``FOR UPDATE`` would also wait for, and block, inserts that point at the jobs (a dispatch
    batch's Volcano Job records, any job's events), which take their locks in their own order.
    """
    if not bindings:
        return {}
    devices = devices or {}
    changed: dict[int, list[str]] = {}
    changed_devices: dict[int, list[str]] = {}
    read: dict[int, tuple[list[str], list[str]]] = {}
    with transaction.atomic():
        rows = Job.objects.select_for_update(no_key=True).filter(
            public_id__in=list(bindings), state__in=FOLLOWED_STATES
        )
        if cluster_id is not None:
            rows = rows.filter(cluster_id=cluster_id)
        for pk, public_id, plan, replicas, device_plan in rows.order_by("pk").values_list(
            "pk", "public_id", "node_plan", "replicas", "device_plan"
        ):
            old = list(plan or [])
            new = _plan_with(old, replicas, bindings[public_id])
            if new != old:
                changed[pk] = new
            old_devices = list(device_plan or [])
            new_devices = _devices_with(
                old_devices, replicas, old, new, devices.get(public_id) or {}
            )
            if new_devices != old_devices:
                changed_devices[pk] = new_devices
            read[pk] = (new, new_devices)
        if changed_devices:
            # Shares: both plans of every row that changed either (as read, under the lock).
            Job.objects.bulk_update(
                [
                    Job(pk=pk, node_plan=read[pk][0], device_plan=read[pk][1])
                    for pk in sorted({*changed, *changed_devices})
                ],
                ["node_plan", "device_plan"],
                batch_size=500,
            )
        elif changed:
            Job.objects.bulk_update(
                [Job(pk=pk, node_plan=plan) for pk, plan in changed.items()],
                ["node_plan"],
                batch_size=500,
            )
    if changed:
        log.info("node plans of %d job(s) corrected from their pods' bindings", len(changed))
    return changed


def cluster_bindings_refresh(*, cluster: Cluster) -> int:
    """Read every portal pod's binding on ``cluster`` and correct the plans that drifted;
    returns how many changed (-1 when the cluster could not be read). What the scheduler asks
    for when its books over-count a node."""
    try:
        pods = cluster_client(cluster).list_pods(label_selector=volcano.managed_selector())
    except (ClusterUnavailable, KubeError) as exc:
        log.warning("could not read the bindings on %s: %s", cluster.name, exc)
        return -1
    return len(
        node_plans_apply(pod_bindings(pods), cluster_id=cluster.pk, devices=pod_devices(pods))
    )
