"""A node that fails under a job moves the job: re-planned within one watch event, not a lease.

The portal pins each replica to the node it planned (node affinity in the Volcano Job), which
keeps its books equal to the cluster. The price shows when that node fails: Volcano restarts
the gang, but the new pods can only go back to the dead node, and sat Pending ("didn't match
Pod's node affinity") until the unschedulable bound (``clusters.deadlines``, ten minutes)
requeued the job, spending one of its allowed requeues, while the job showed RUNNING.

So the portal follows the nodes themselves. A node is *in trouble* when a replica can no
longer run there (``clusters.nodes.node_trouble``): its Ready condition is not True
(NotReady, or Unknown when the kubelet stopped reporting), it carries a ``NoExecute`` taint
the portal's pods do not tolerate (the node lifecycle controller's
``node.kubernetes.io/unreachable``), or it was deleted. Every job holding GPUs with a replica
planned there ends its attempt at once (:func:`node_failure_requeue`): PREEMPTING with reason
:data:`NODE_FAILURE_REASON`, its Volcano Job deleted by the eviction task, then QUEUED with its
attempt archived and ``submitted_at`` kept, so it is at the head of its line (its team's jobs
submitted after it come after it) and the next cycle, which sees the node unusable in the same
breath (:func:`node_rows_mark`), places it on healthy nodes.

A cordon (``spec.unschedulable``) is not trouble by itself. It evicts nothing: an admin
cordons a node precisely to let its jobs finish before maintenance, and ending a multi-hour
training run that has no checkpoint would throw its work away. A cordoned node is only left
out of new placements (its rows are ``schedulable=False``). The job moves when its pods do
go: a ``kubectl drain`` evicts them, Volcano restarts the gang (``Restarting``, then
``Pending``), and the new pods, pinned to the cordoned node, could only wait there. The status
path (``clusters.status``, the watch of Volcano Jobs and the reconcile) calls
:func:`restarting_job_replan` for a gang that restarts; it checks the job's planned nodes in
the books and sends a job with one that takes no new pods through the same
:func:`node_failure_requeue`.

Why end the attempt rather than re-pin the running Volcano Job: a Volcano Job's pod template
cannot be changed while it exists (the affinity of its pods is fixed at creation), so a new
placement is a new object in any case, and a new admission is the one path that already checks
quota, fair share and capacity, archives the old run and writes the new plan. Why at once,
without waiting for the pods to be evicted: Kubernetes marks a node NotReady only after its
heartbeats have been missing for the node monitor's grace period (40 s by default), and evicts
its pods only after a further ``tolerationSeconds`` (300 s); a cordon evicts nothing by itself.
Waiting for either would leave the job's GPUs idle for minutes while healthy nodes are free.

The stop does not wait for the dead node either: pods on a NotReady node stay Terminating
(no kubelet confirms their end) until it returns, its Node is deleted or it is tainted
out-of-service, which may be never. Each run's Volcano Job has a name of its own
(``rules.volcano.volcano_job_name``), so the next run's pods never need theirs; the stop
ends once every pod left is Terminating on an unreachable node (:func:`nodes_unreachable`),
and the timeline says so (``clusters.teardown``).

The requeue is the cluster's fault, not the job's: its reason is neither ``Preempted`` (which
counts in ``preemption_count``) nor ``Unschedulable`` (whose requeues are bounded), and the
new attempt is a new Volcano Job whose ``retryCount`` starts again from zero.

Three paths call it: the nodes watch (``clusters.watch``, within a second of the change), the
inventory sync (``clusters.tasks.sync_inventory``, every minute, the backstop for a watch that
was down), and a restarting gang whose planned node is cordoned (:func:`restarting_job_replan`).
Both are compare-and-sets through ``job_transition``, so they can meet without harm.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from clusters.models import Cluster, Node
from portal.jobs.state import job_transition
from portal.models import Job, JobState

log = logging.getLogger(__name__)

__all__ = [
    "NODE_FAILURE_REASON",
    "node_failure_requeue",
    "node_rows_mark",
    "nodes_unreachable",
    "planned_nodes_unfit",
    "restarting_job_replan",
]

S = JobState
NODE_FAILURE_REASON = "NodeFailure"
# A job in one of these states holds GPUs on its planned nodes and is not already stopping.
MOVABLE_STATES = (S.ADMITTED, S.SUBMITTED, S.RUNNING)
# The taint ``kubectl cordon`` adds with ``spec.unschedulable``.
CORDON_TAINT = "node.kubernetes.io/unschedulable"
# The taint the node lifecycle controller adds when a node's kubelet stops reporting.
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def node_rows_mark(
    *, cluster: Cluster, name: str, ready: bool, schedulable: bool, taints: list[Any]
) -> int:
    """Write one node's health onto its inventory rows now, so the next scheduling cycle
    leaves it out without waiting for the inventory's next sync; returns rows changed."""
    return (
        Node.objects.filter(cluster_id=cluster.pk, name=name)
        .exclude(ready=ready, schedulable=schedulable, taints=taints)
        .update(ready=ready, schedulable=schedulable, taints=taints)
    )


def node_failure_requeue(
    *,
    cluster: Cluster,
    troubled: Mapping[str, str],
    now: dt.datetime | None = None,
    job_ids: list[int] | None = None,
) -> list[int]:
    """End the attempt of every job on ``cluster`` (or of ``job_ids`` only) with a replica
    planned on a troubled node (name → what is wrong with it); returns the ids now PREEMPTING,
    whose Volcano Jobs the caller has deleted (``clusters.tasks.evict_job_enqueue_many``)."""
    if not troubled:
        return []
    now = now or timezone.now()
    jobs = Job.objects.filter(cluster_id=cluster.pk, state__in=MOVABLE_STATES)
    if job_ids is not None:
        jobs = jobs.filter(pk__in=job_ids)
    rows = jobs.values_list("pk", "state", "node_plan", "attempt_number")
    moved: list[int] = []
    for pk, state, plan, run in rows:
        hit = {i: n for i, n in enumerate(plan or []) if n in troubled}
        if not hit:
            continue
        nodes = sorted(set(hit.values()))
        what = "; ".join(f"node {n} {troubled[n]}" for n in nodes)
        replicas = ", ".join(str(i) for i in sorted(hit))
        message = (
            f"On cluster {cluster.name}, {what} (replica {replicas} ran or was to run there). "
            "The portal ends this attempt and requeues the job in its place in line (its "
            "submit time kept) to run on healthy nodes; the failure is the cluster's, so this "
            "requeue counts against neither its retries nor its requeues."
        )
        # A compare-and-set from the state and run just read: a job that moved since (even
        # requeued and placed again, in the same state) is left alone.
        if job_transition(
            job_id=pk,
            expected=state,
            same_run=run,
            to=S.PREEMPTING,
            reason=NODE_FAILURE_REASON,
            message=message,
            now=now,
        ):
            moved.append(pk)
    if moved:
        log.warning(
            "cluster %s: %d job(s) on troubled node(s) %s requeued",
            cluster.name,
            len(moved),
            ", ".join(sorted(troubled)),
        )
    return moved


def planned_nodes_unfit(*, cluster_id: int, plan: list[str] | None) -> dict[str, str]:
    """The nodes of ``plan`` where a restarted replica cannot be placed again, by the books
    (name → why): gone from the inventory, not Ready, or taking no new pods (cordoned, or a
    ``NoSchedule`` taint the portal's pods do not tolerate)."""
    names = sorted({n for n in plan or [] if n})
    if not names:
        return {}
    rows: dict[str, tuple[bool, bool, list[Any]]] = {}
    for name, ready, schedulable, taints in Node.objects.filter(
        cluster_id=cluster_id, name__in=names
    ).values_list("name", "ready", "schedulable", "taints"):
        was = rows.get(name, (True, True, []))
        rows[name] = (was[0] and ready, was[1] and schedulable, list(taints or []))
    unfit: dict[str, str] = {}
    for name in names:
        if name not in rows:
            unfit[name] = "is gone from the cluster"
            continue
        ready, schedulable, taints = rows[name]
        if not ready:
            unfit[name] = "is NotReady"
        elif not schedulable:
            cordoned = any(t.get("key") == CORDON_TAINT for t in taints if isinstance(t, dict))
            unfit[name] = (
                "is cordoned (drain) and its pods were evicted"
                if cordoned
                else "takes no new pods (a NoSchedule taint) and its pods were evicted"
            )
    return unfit


def restarting_job_replan(*, job: Job, now: dt.datetime | None = None) -> bool:
    """A job whose gang restarted (its pods evicted, Volcano ``Restarting`` or ``Pending``
    again) moves at once when a planned node takes no new pods: its new pods, pinned there,
    could only wait. Returns whether the job was stopped (its Volcano Job deletion enqueued).

    This is what makes a cordon safe: the cordon alone leaves the job running; the drain that
    follows it restarts the gang, and this sends the job elsewhere."""
    if job.state not in MOVABLE_STATES or job.cluster_id is None:
        return False
    unfit = planned_nodes_unfit(cluster_id=job.cluster_id, plan=job.node_plan)
    if not unfit:
        return False
    cluster = Cluster.objects.filter(pk=job.cluster_id).first()
    if cluster is None:
        return False
    # Only this job: the others on a cordoned node keep running until their own pods go.
    moved = node_failure_requeue(cluster=cluster, troubled=unfit, now=now, job_ids=[job.pk])
    from clusters.tasks import evict_job_enqueue_many  # tasks imports the status path

    evict_job_enqueue_many(moved)
    return job.pk in moved


def nodes_unreachable(*, cluster_id: int, names: set[str]) -> set[str]:
    """The nodes of ``names`` whose kubelet cannot confirm a pod's end, by the books: gone from
    the inventory, or not Ready with the node lifecycle controller's
    ``node.kubernetes.io/unreachable`` taint (Ready ``Unknown``: the kubelet stopped
    reporting). A pod deleted there stays Terminating (see ``clusters.teardown``), and its GPUs
    are out of the scheduler's capacity anyway. A node NotReady whose kubelet still reports
    (Ready ``False``: a runtime or network plugin in trouble) is not one of them: it still
    stops its pods, within their grace period, and confirms it."""
    rows = Node.objects.filter(cluster_id=cluster_id, name__in=names).values_list(
        "name", "ready", "taints"
    )
    reporting = {
        name
        for name, ready, taints in rows
        if ready or not any(t.get("key") == UNREACHABLE_TAINT for t in taints or ())
    }
    return {n for n in names if n and n not in reporting}
