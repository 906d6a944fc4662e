"""Taking a job off its cluster: a cancel (``CANCELLING → CANCELLED``) or an eviction
(``PREEMPTING → QUEUED``).

Delete the Volcano Job with background propagation and move on once a read says it is gone;
a job still being deleted (finalizers) is looked at again a little later, and the watcher's
DELETED event or the reconcile finish the job if this task does not. The pods' last log lines
are kept first (``clusters.kept_logs``); an inference job's Service and Ingress are deleted
after its Volcano Job (``clusters.serving``). Pods on a node that went unreachable stay
Terminating (no kubelet confirms their end): the stop waits for them and says so once on the
job's timeline, with what ends the wait (:func:`_note_left_terminating`).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from clusters.clients import ClusterUnavailable, cluster_client, cluster_job_namespace
from clusters.kept_logs import job_logs_keep
from clusters.kube import KubeError
from clusters.manifests import submission_uid
from clusters.models import VolcanoJobRecord
from clusters.node_failure import nodes_unreachable
from clusters.outcome import Outcome, backoff_seconds, job_event_record, job_for_task
from clusters.serving import serving_withdraw
from portal.jobs.state import (
    cancelling_end,
    preempting_end,
)
from portal.models import Job, JobEvent, JobState
from rules import volcano

__all__ = ["job_cancel_on_cluster", "job_evict", "preemption_message"]

LEFT_TERMINATING = "PodsLeftTerminating"
# A Volcano Job deleted in the foreground is read again this often until its pods are gone
# (the watcher usually reports its disappearance first).
TERMINATING_POLL_SECONDS = 5.0


def _where(job: Job) -> tuple[str, str]:
    """Where the Volcano Job of the job's current run is: its record's, when the record is of
    this run (the dispatch rewrites it as the run is SUBMITTED, so a run stopped before that
    still finds its predecessor's), else the run's own name."""
    record = VolcanoJobRecord.objects.filter(job_id=job.pk).first()
    if record is not None and record.submission_uid == submission_uid(job):
        return record.namespace, record.name
    assert job.cluster is not None
    return (
        cluster_job_namespace(job.cluster, job.team.slug),
        volcano.volcano_job_name(str(job.public_id), job.attempt_number),
    )


def _remove(job: Job, *, attempt: int) -> Outcome | None:
    """Delete the job's Volcano Job and confirm it is gone; None once it is."""
    if job.cluster is None:
        return None
    namespace, name = _where(job)
    job_logs_keep(job=job)  # the pods' logs go with them: keep the last lines first (once)
    try:
        client = cluster_client(job.cluster)
        try:
            client.delete_job(namespace, name, wait_for_pods=True)
        except KubeError as exc:
            if not exc.not_found:
                raise
        try:
            leftover = client.get_job(namespace, name)
        except KubeError as exc:
            if not exc.not_found:
                raise
            leftover = None
    except ClusterUnavailable as exc:
        return Outcome(done=False, message=str(exc), retry_in=backoff_seconds(attempt))
    except KubeError as exc:
        return Outcome(
            done=False, message=exc.message, retry_in=backoff_seconds(attempt, exc.retry_after)
        )
    if leftover is not None and (
        nodes := _only_on_unreachable_nodes(job, client, namespace, leftover)
    ):
        # No kubelet will confirm their end, and nothing waits for their names: the next run
        # is a Volcano Job of its own (``volcano.volcano_job_name``). Their node is out of the
        # scheduler's capacity, so their GPUs are not offered to anyone meanwhile.
        _note_left_terminating(job, namespace, name, nodes)
        leftover = None
    if leftover is not None:  # its pods still terminating, still holding their GPUs
        return Outcome(
            done=False,
            message="still being deleted",
            retry_in=min(backoff_seconds(attempt), TERMINATING_POLL_SECONDS),
        )
    # The Service (and Ingress) go too: the owner reference would take them with the Volcano
    # Job on a real cluster, but a delete of our own does not depend on a garbage collector,
    # and a requeued job's next dispatch must not find the last run's endpoint.
    if job.serves:
        problem = serving_withdraw(job=job, client=client)
        if problem:
            return Outcome(done=False, message=problem, retry_in=backoff_seconds(attempt))
    VolcanoJobRecord.objects.filter(job_id=job.pk).update(deleted_at=timezone.now())
    return None


def _only_on_unreachable_nodes(
    job: Job, client: Any, namespace: str, leftover: dict[str, Any]
) -> list[str]:
    """The unreachable nodes holding the Volcano Job's last pods, when every pod left is
    Terminating on one (else [])."""
    uid = (leftover.get("metadata") or {}).get("uid")
    try:
        pods = client.list_pods(label_selector=volcano.job_selector(str(job.public_id)))
    except (ClusterUnavailable, KubeError):
        return []
    nodes: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != namespace:
            continue
        if uid and not any(o.get("uid") == uid for o in meta.get("ownerReferences") or []):
            continue  # a pod of another Job of this name
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not meta.get("deletionTimestamp") or not node:
            return []
        nodes.add(node)
    if not nodes or job.cluster_id is None:
        return []
    if nodes_unreachable(cluster_id=job.cluster_id, names=nodes) != nodes:
        return []
    return sorted(nodes)


def _note_left_terminating(job: Job, namespace: str, name: str, nodes: list[str]) -> None:
    """Say once, on the job's timeline, that its stop did not wait for its last pods: they
    are Terminating on an unreachable node, and no kubelet will confirm their end.

    Why the portal does not wait: the next run's Volcano Job has a name of its own, so its
    pods never need these pods' names, and the node is out of the scheduler's capacity, so its
    GPUs are offered to no one until it is back. Waiting (the portal has no pod delete
    permission, ``deploy/rbac.yaml``, to force them) would hold the job for as long as the node
    stays dead. This is what the Kubernetes Job controller does by default (its
    ``podReplacementPolicy`` replaces a Terminating pod at once); the price is the same: a node
    only cut off from the control plane may run the old pods until its kubelet reconnects and
    stops them, so the timeline says so, and the container can tell its run by
    ``GPUPOOL_ATTEMPT``."""
    where = ", ".join(nodes)
    verb = "requeued" if job.state == JobState.PREEMPTING else "ended"
    message = (
        f"The pods of Volcano Job {namespace}/{name} stay Terminating on unreachable node "
        f"{where}: no kubelet confirms their end. The job is {verb} without waiting for them "
        "(its next run is a Volcano Job of its own name). If the node is only cut off from "
        "the cluster, they may run until its kubelet reconnects and stops them. They go when "
        f"{where} comes back, its Node is deleted, or an admin taints it "
        "node.kubernetes.io/out-of-service (kubectl taint nodes "
        f"{nodes[0]} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute)."
    )
    since = (
        JobEvent.objects.filter(job_id=job.pk, to_state=job.state)
        .exclude(from_state=job.state)
        .order_by("-created_at", "-id")
        .values_list("created_at", flat=True)
        .first()
    )
    told = JobEvent.objects.filter(job_id=job.pk, reason=LEFT_TERMINATING)
    if since is not None:
        told = told.filter(created_at__gte=since)
    if not told.exists():
        job_event_record(job, LEFT_TERMINATING, message)


def _late_withdraw(job: Job | None) -> None:
    """The watch saw the Volcano Job go and ended the job before this task ran: its endpoint
    is still this task's to delete (best effort; the cluster reconcile is the backstop)."""
    if job is not None and job.serves and job.endpoint_url and job.state not in _STOPPING:
        serving_withdraw(job=job)


_STOPPING = frozenset({JobState.CANCELLING, JobState.PREEMPTING})


def job_cancel_on_cluster(*, job_id: int, attempt: int = 1) -> Outcome:
    """Delete a CANCELLING job's Volcano Job, then mark it CANCELLED."""
    job = job_for_task(job_id)
    if job is None or job.state != JobState.CANCELLING:
        _late_withdraw(job)
        return Outcome(done=True, message="not cancelling")
    pending = _remove(job, attempt=attempt)
    if pending is not None:
        return pending
    cancelling_end(  # CANCELLED, or FAILED with the reason the portal stopped the job for
        job_id=job.pk,
        message="The Volcano Job was deleted." if job.cluster else "Nothing was running.",
    )
    return Outcome(done=True, message="cancelled")


def preemption_message(job: Job) -> str:
    """The message the scheduler wrote when it decided to preempt this job."""
    event = (
        JobEvent.objects.filter(job_id=job.pk, to_state=JobState.PREEMPTING)
        .exclude(from_state=JobState.PREEMPTING)
        .order_by("-created_at", "-id")
        .first()
    )
    return event.message if event else ""


def job_evict(*, job_id: int, attempt: int = 1) -> Outcome:
    """Delete a PREEMPTING job's Volcano Job, then requeue it (reason Preempted)."""
    job = job_for_task(job_id)
    if job is None or job.state != JobState.PREEMPTING:
        _late_withdraw(job)
        return Outcome(done=True, message="not preempting")
    pending = _remove(job, attempt=attempt)
    if pending is not None:
        return pending
    preempting_end(job_id=job.pk)  # QUEUED: Preempted, or Requeued by the portal's own stop
    return Outcome(done=True, message="requeued")
