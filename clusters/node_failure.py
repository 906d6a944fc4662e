"""A node that fails under a job moves the job: re-planned within one watch event, not a lease.

The portal pins each replica to the node it planned (node affinity in the Volcano Job), which
keeps its books equal to the cluster. The price shows when that node fails: Volcano restarts
the gang, but the new pods can only go back to the dead node, and sat Pending ("didn't match
Pod's node affinity") until the unschedulable bound (``clusters.deadlines``, ten minutes)
requeued the job, spending one of its allowed requeues, while the job showed RUNNING.

So the portal follows the nodes themselves. A node is *in trouble* when a replica can no
longer run there (``clusters.inventory.node_trouble``): its Ready condition is not True
(NotReady, or Unknown when the kubelet stopped reporting), it is cordoned
(``spec.unschedulable``, the first step of ``kubectl drain``), it carries a ``NoExecute`` taint
the portal's pods do not tolerate (the node lifecycle controller's
``node.kubernetes.io/unreachable``), or it was deleted. Every job holding GPUs with a replica
planned there ends its attempt at once (:func:`node_failure_requeue`): PREEMPTING with reason
:data:`NODE_FAILURE_REASON`, its Volcano Job deleted by the eviction task, then QUEUED with its
attempt archived and ``submitted_at`` kept, so it is at the head of its line (its team's jobs
submitted after it come after it) and the next cycle, which sees the node unusable in the same
breath (:func:`node_rows_mark`), places it on healthy nodes.

Why end the attempt rather than re-pin the running Volcano Job: a Volcano Job's pod template
cannot be changed while it exists (the affinity of its pods is fixed at creation), so a new
placement is a new object in any case, and a new admission is the one path that already checks
quota, fair share and capacity, archives the old run and writes the new plan. Why at once,
without waiting for the pods to be evicted: Kubernetes marks a node NotReady only after its
heartbeats have been missing for the node monitor's grace period (40 s by default), and evicts
its pods only after a further ``tolerationSeconds`` (300 s); a cordon evicts nothing by itself.
Waiting for either would leave the job's GPUs idle for minutes while healthy nodes are free.

The requeue is the cluster's fault, not the job's: its reason is neither ``Preempted`` (which
counts in ``preemption_count``) nor ``Unschedulable`` (whose requeues are bounded), and the
new attempt is a new Volcano Job whose ``retryCount`` starts again from zero.

Two paths call it: the nodes watch (``clusters.watch``, within a second of the change) and the
inventory sync (``clusters.tasks.sync_inventory``, every minute, the backstop for a watch that
was down).
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
]

S = JobState
NODE_FAILURE_REASON = "NodeFailure"
# A job in one of these states holds GPUs on its planned nodes and is not already stopping.
MOVABLE_STATES = (S.ADMITTED, S.SUBMITTED, S.RUNNING)


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
    *, cluster: Cluster, troubled: Mapping[str, str], now: dt.datetime | None = None
) -> list[int]:
    """End the attempt of every job on ``cluster`` with a replica planned on a troubled node
    (name → what is wrong with it); returns the ids now PREEMPTING, whose Volcano Jobs the
    caller has deleted (``clusters.tasks.evict_job_enqueue_many``)."""
    if not troubled:
        return []
    now = now or timezone.now()
    rows = Job.objects.filter(cluster_id=cluster.pk, state__in=MOVABLE_STATES).values_list(
        "pk", "state", "node_plan"
    )
    moved: list[int] = []
    for pk, state, plan in rows:
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
        # A compare-and-set from the state just read: a job that moved since is left alone.
        if job_transition(
            job_id=pk,
            expected=state,
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
