"""Following Volcano Jobs and their pods until the portal job ends.

Two paths feed the same functions. The watcher (``clusters.watch``) applies each event as it
arrives, within a second or so; the periodic reconcile (``clusters.reconcile``) lists
everything the portal owns on a cluster and applies the lot, so a dropped event, a watcher
that was down or a 410 gap is healed on the next round. Every change is a compare-and-set
through ``job_transition``, so the two paths, or two reconciles, can meet without harm.

Volcano phase → portal state
    ``Pending`` keeps SUBMITTED. ``Running`` and ``Completing`` mean RUNNING. ``Completed`` is
    SUCCEEDED; ``Failed`` and ``Terminated`` are FAILED, with Volcano's reason and the last
    pod-level problem in the message. ``Restarting``, ``Aborting``, ``Aborted`` and
    ``Terminating`` are noted on the timeline and change nothing, except that a gang that
    restarts (``Restarting``, or ``Pending`` again) while a planned node takes no new pods (a
    drain: cordon, then evictions) moves at once
    (``clusters.node_failure.restarting_job_replan``). Any other phase is logged
    and treated as not finished. A Volcano Job that disappears while the portal did not ask
    for it fails the job with that reason; one that disappears while the job is CANCELLING or
    PREEMPTING completes the cancel or the requeue.

Pod-level facts
    Unschedulable (with the scheduler's message), image pull failures, crash loops, OOM kills,
    non-zero exit codes and lost nodes become JobEvents that do not change the state. Each is
    written once: its key is kept on the job's :class:`~clusters.models.VolcanoJobRecord`.
    Pod bindings overwrite the job's ``node_plan`` (the scheduler's plan) with where the
    replicas actually run.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters.bindings import (
    FOLLOWED_STATES,
    node_plans_apply,
)
from clusters.clients import ClusterUnavailable, cluster_client
from clusters.deadlines import MAX_RUNTIME_REASON
from clusters.kube import KubeError
from clusters.manifests import submission_uid
from clusters.models import VolcanoJobRecord
from clusters.node_failure import restarting_job_replan
from clusters.observed import (
    KNOWN_PHASES,
    NOTED_PHASES,
    RUNNING_PHASES,
    TERMINAL_PHASES,
    JobView,
    PodView,
    pod_view,
)
from clusters.outcome import job_event_record
from clusters.serving import endpoint_ready_apply, serving_withdraw
from portal.jobs.state import cancelling_end, job_transition, preempting_end
from portal.models import TERMINAL_STATES, Job, JobState
from rules import volcano

log = logging.getLogger(__name__)

__all__ = ["StatusOutcome", "job_status_apply", "pods_apply"]

S = JobState
MAX_REPORTED = 300


def _clamp(moment: dt.datetime | None, now: dt.datetime) -> dt.datetime:
    """A cluster's timestamp, but never in the portal's future (clocks drift; kubesim runs
    fast)."""
    return min(moment, now) if moment else now


def _record_of(job: Job) -> VolcanoJobRecord | None:
    try:
        return job.volcano  # type: ignore[no-any-return]
    except VolcanoJobRecord.DoesNotExist:
        return None


def pods_apply(*, job: Job, pods: Iterable[PodView], plans: bool = True) -> int:
    """Record new pod-level facts as JobEvents and real bindings as the node plan; returns the
    number of events written.

    Bindings count from the moment the Volcano Job exists, even while the job is still
    ADMITTED (the dispatcher has created it but not yet written SUBMITTED) and before its
    record is written: a binding dropped then would leave the plan wrong until the pod's next
    event, and the capacity rule counting GPUs where they are not. ``plans=False`` leaves the
    plan to a caller that corrects many jobs in one pass (the reconcile).
    """
    pods = [p for p in pods if p.of_attempt(job.attempt_number)]
    if job.state not in FOLLOWED_STATES or not pods:
        return 0
    if plans:
        bound = {p.replica: p.node for p in pods if p.replica is not None and p.node}
        devices = {p.replica: p.device for p in pods if p.replica is not None and p.device}
        changed = (
            node_plans_apply({job.public_id: bound}, devices={job.public_id: devices})
            if bound
            else {}
        )
        if job.pk in changed:
            job.node_plan = changed[job.pk]
    if job.state == S.ADMITTED:
        return 0  # facts wait for the record the dispatcher writes with SUBMITTED
    written = 0
    with transaction.atomic():
        record = VolcanoJobRecord.objects.select_for_update().filter(job_id=job.pk).first()
        if record is None:
            return 0
        reported = list(record.reported or [])
        seen = set(reported)
        pod_map: dict[str, Any] = dict(record.pods or {})
        for pod in pods:
            for fact in pod.facts:
                if fact.key in seen:
                    continue
                job_event_record(job, fact.reason, fact.message)
                seen.add(fact.key)
                reported.append(fact.key)
                written += 1
            if pod.replica is not None:
                entry = {"pod": pod.name, "node": pod.node, "phase": pod.phase}
                if job.serves:
                    entry["ready"] = pod.ready
                if pod.restarts:
                    entry["restarts"] = pod.restarts
                previous = pod_map.get(str(pod.replica)) or {}
                entry["problem"] = pod.problem or previous.get("problem", "")
                pod_map[str(pod.replica)] = entry
        changed_record = written or pod_map != (record.pods or {})
        if changed_record:
            record.reported = reported[-MAX_REPORTED:]
            record.pods = pod_map
            record.seen_at = timezone.now()
            record.save(update_fields=["reported", "pods", "seen_at"])
        if job.serves:
            endpoint_ready_apply(job=job, pods=pod_map)
    return written


def _problems(record: VolcanoJobRecord | None) -> str:
    if record is None:
        return ""
    problems = [
        str(entry.get("problem"))
        for _, entry in sorted((record.pods or {}).items(), key=lambda kv: int(kv[0]))
        if entry.get("problem")
    ]
    return "; ".join(problems[:3])


def _problems_now(job: Job) -> str:
    """The pods' problems read from the cluster right now: the pod watcher may not have
    delivered them yet when the job's own event says it failed."""
    try:
        client = cluster_client(job.cluster)  # type: ignore[arg-type]
        objects = client.list_pods(label_selector=volcano.job_selector(str(job.public_id)))
    except (ClusterUnavailable, KubeError):
        return ""
    pods = [p for p in (pod_view(o) for o in objects) if p is not None]
    pods_apply(job=job, pods=pods)
    return _problems(VolcanoJobRecord.objects.filter(job_id=job.pk).first())


def _deadline_exceeded(job: Job) -> bool:
    """Whether a pod of the job was stopped at its activeDeadlineSeconds (read afresh: the pod
    watcher or ``_problems_now`` may have just recorded it)."""
    reported = (
        VolcanoJobRecord.objects.filter(job_id=job.pk).values_list("reported", flat=True).first()
    )
    return any(str(key).endswith(":deadline") for key in reported or ())


def _note_once(job: Job, record: VolcanoJobRecord, key: str, reason: str, message: str) -> None:
    with transaction.atomic():
        locked = VolcanoJobRecord.objects.select_for_update().get(pk=record.pk)
        reported = list(locked.reported or [])
        if key in reported:
            return
        job_event_record(job, reason, message)
        reported.append(key)
        locked.reported = reported[-MAX_REPORTED:]
        locked.save(update_fields=["reported"])
        record.reported = locked.reported


def _record_from_view(job: Job, view: JobView, now: dt.datetime) -> VolcanoJobRecord:
    """The record a dispatcher died before writing, rebuilt from the object itself."""
    record, _ = VolcanoJobRecord.objects.get_or_create(
        job_id=job.pk,
        defaults={
            "cluster_id": job.cluster_id,
            "namespace": view.namespace,
            "name": view.name,
            "submission_uid": view.submission_uid,
            "uid": view.uid,
            "phase": view.phase,
            "created_at": now,
            "seen_at": now,
        },
    )
    return record


def _start(job: Job, view: JobView, now: dt.datetime) -> bool:
    started = _clamp(view.running_since, now)
    if job.admitted_at and started < job.admitted_at:
        started = job.admitted_at
    won = job_transition(
        job_id=job.pk,
        expected=S.SUBMITTED,
        to=S.RUNNING,
        same_run=job.attempt_number,
        reason="Running",
        message=f"Volcano Job {view.name} is {view.phase}: all {job.replicas} replica(s) started.",
        updates={"started_at": started},
        now=now,
    )
    if won:
        job.state = S.RUNNING
    return won


class StatusOutcome(enum.StrEnum):
    """What applying a Volcano Job's status did to its portal job (a ``str``: the reconcile
    counts them by value in its message)."""

    IGNORED = "ignored"  # the job is not on a cluster (QUEUED, ADMITTED, or finished)
    OTHER_LINEAGE = "other-lineage"  # an object from another admission of this job
    CANCELLED = "cancelled"
    CANCELLING = "cancelling"  # still being deleted
    REQUEUED = "requeued"
    PREEMPTING = "preempting"  # still being deleted
    VANISHED = "vanished"  # gone without the portal asking: FAILED
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOTED = "noted"  # a phase worth a timeline entry, no state change
    RESTARTING = "restarting"  # its gang restarted and waits for nodes again
    UNKNOWN_PHASE = "unknown-phase"
    UNCHANGED = "unchanged"


def job_status_apply(
    *,
    job: Job,
    view: JobView | None,
    deleted: bool = False,
    now: dt.datetime | None = None,
) -> StatusOutcome:
    """Move ``job`` to where its Volcano Job says it is; returns what happened.

    ``view`` None with ``deleted`` means the object is gone (a DELETED event without body, or
    a reconcile that did not find it).
    """
    now = now or timezone.now()
    if job.state in TERMINAL_STATES or job.state in (S.QUEUED, S.ADMITTED):
        return StatusOutcome.IGNORED
    record = _record_of(job)
    if view is not None and view.submission_uid != submission_uid(job):
        return StatusOutcome.OTHER_LINEAGE  # not ours
    gone = deleted or (view is None)
    if job.state in (S.CANCELLING, S.PREEMPTING):
        return _stop_apply(job, gone=gone, now=now)
    # SUBMITTED or RUNNING from here on.
    if record is None and view is not None:
        record = _record_from_view(job, view, now)
    elif record is not None and view is not None:
        # The record as read: one a newer run's dispatch rewrote since is left alone.
        VolcanoJobRecord.objects.filter(pk=record.pk, uid=record.uid).update(
            phase=view.phase, uid=view.uid or record.uid, seen_at=now
        )
    if gone and (view is None or view.phase not in TERMINAL_PHASES):
        return _endpoint_withdrawn(job, _vanished_apply(job, view, record, now))
    assert view is not None
    was_running = job.state == S.RUNNING
    if (view.phase in RUNNING_PHASES or view.phase in TERMINAL_PHASES) and job.state == S.SUBMITTED:
        _start(job, view, now)
    if view.phase in TERMINAL_PHASES:
        return _endpoint_withdrawn(job, _end_apply(job, view, record, now))
    outcome = _phase_note(job, view, record, was_running=was_running)
    if outcome == StatusOutcome.RESTARTING or view.phase == "Restarting":
        # Its pods went (a drain's evictions): new ones, pinned to a node that takes no new
        # pods (cordoned), could only wait there, so the job moves now.
        restarting_job_replan(job=job, now=now)
    return outcome


def _endpoint_withdrawn(job: Job, outcome: StatusOutcome) -> StatusOutcome:
    """An inference job that ended loses its Service and Ingress as its end is seen (the
    watch's latency), whichever way it ended; returns ``outcome``.

    Only a cancel or a preemption used to delete them at once (``clusters.teardown``): an
    ended Volcano Job stays for its logs, so its owner reference keeps them too, and a job
    that succeeded or failed kept a reachable endpoint until the next cluster reconcile. A
    failed delete is left to that reconcile (``serving_reconcile``)."""
    if job.serves:
        serving_withdraw(job=job)
    return outcome


def _stop_apply(job: Job, *, gone: bool, now: dt.datetime) -> StatusOutcome:
    """A stop keeps the job's GPUs counted until its Volcano Job is gone; then a user's cancel
    ends CANCELLED, the portal's own stop (max runtime, pods that cannot start) FAILED with
    its reason, and a preemption or requeue QUEUED."""
    if job.state == S.CANCELLING:
        if not gone:
            return StatusOutcome.CANCELLING
        cancelling_end(job_id=job.pk, message="The Volcano Job was deleted.", now=now)
        return _endpoint_withdrawn(job, StatusOutcome.CANCELLED)
    if not gone:
        return StatusOutcome.PREEMPTING
    preempting_end(job_id=job.pk, now=now)
    return _endpoint_withdrawn(job, StatusOutcome.REQUEUED)


def _vanished_apply(
    job: Job, view: JobView | None, record: VolcanoJobRecord | None, now: dt.datetime
) -> StatusOutcome:
    """The Volcano Job is gone though the portal did not delete it: FAILED, not requeued."""
    last = f" (last phase {view.phase or 'unknown'})" if view is not None else ""
    name = view.name if view is not None else (record.name if record else job.volcano_job_name)
    job_transition(
        job_id=job.pk,
        expected=(S.SUBMITTED, S.RUNNING),
        to=S.FAILED,
        same_run=job.attempt_number,
        reason="VolcanoJobDeleted",
        message=f"The cluster {job.cluster} lost the Volcano Job {name}{last}: it is gone "
        "and the portal did not delete it (someone deleted it, or the cluster lost its "
        "state, e.g. an API server that restarted empty). The job is not requeued, since "
        "it may have done part of its work; submit it again to rerun it.",
        now=now,
    )
    VolcanoJobRecord.objects.filter(job_id=job.pk).update(deleted_at=now)
    return StatusOutcome.VANISHED


def _end_apply(
    job: Job, view: JobView, record: VolcanoJobRecord | None, now: dt.datetime
) -> StatusOutcome:
    """A terminal phase: SUCCEEDED for Completed, FAILED with Volcano's and the pods' words
    (or the max runtime, when the kubelet stopped it for that) for Failed and Terminated."""
    phase = view.phase
    if phase == "Completed":
        job_transition(
            job_id=job.pk,
            expected=S.RUNNING,
            to=S.SUCCEEDED,
            same_run=job.attempt_number,
            reason="Succeeded",
            message=f"Volcano Job {view.name} completed.",
            updates={"finished_at": _clamp(view.finished_at, now)},
            now=now,
        )
        return StatusOutcome.SUCCEEDED
    volcano_says = " ".join(p for p in (view.reason, view.message) if p)
    pods_say = _problems(record) or _problems_now(job)
    message = f"Volcano Job {view.name} {phase.lower()}"
    message += f": {volcano_says}" if volcano_says else ""
    message += f". {pods_say}." if pods_say else "."
    deadline = _deadline_exceeded(job)
    if deadline:
        message = (
            f"The job ran past its max runtime of {job.max_runtime_seconds // 60} min: the "
            f"kubelet stopped its pods (DeadlineExceeded). {message}"
        )
    job_transition(
        job_id=job.pk,
        expected=(S.SUBMITTED, S.RUNNING),
        to=S.FAILED,
        same_run=job.attempt_number,
        reason=MAX_RUNTIME_REASON if deadline else f"Volcano{phase}",
        message=message,
        updates={"finished_at": _clamp(view.finished_at, now)},
        now=now,
    )
    return StatusOutcome.FAILED


def _phase_note(
    job: Job, view: JobView, record: VolcanoJobRecord | None, *, was_running: bool
) -> StatusOutcome:
    """A phase that changes no state but may be worth one timeline entry (each once)."""
    phase = view.phase
    if phase in NOTED_PHASES and record is not None:
        detail = f" ({view.reason}: {view.message})" if view.reason or view.message else ""
        _note_once(
            job,
            record,
            f"phase:{phase}:{view.retry_count}",
            f"Volcano{phase}",
            f"Volcano Job {view.name} is {phase}{detail}; retry {view.retry_count} of "
            f"{job.max_retry}.",
        )
        return StatusOutcome.NOTED
    if phase == "Pending" and job.state == S.RUNNING and record is not None:
        # Its gang was restarted (an eviction, a lost node) and waits to be placed again: the
        # job keeps its GPUs and stays RUNNING for the books, but is shown as restarting.
        _note_once(
            job,
            record,
            f"pending:{view.retry_count}",
            "PodsPending",
            f"Volcano Job {view.name} is Pending again after restart {view.retry_count} of "
            f"{job.max_retry}: its pods wait to be placed on nodes.",
        )
        return StatusOutcome.RESTARTING
    if phase in RUNNING_PHASES and was_running and view.retry_count and record is not None:
        _note_once(
            job,
            record,
            f"resumed:{view.retry_count}",
            "Resumed",
            f"Volcano Job {view.name} is {phase} again after restart {view.retry_count} of "
            f"{job.max_retry}.",
        )
    if phase not in KNOWN_PHASES:
        log.warning(
            "job %s: Volcano Job %s has unknown phase %r; treating it as not finished",
            job.pk,
            view.name,
            phase,
        )
        return StatusOutcome.UNKNOWN_PHASE
    return StatusOutcome.UNCHANGED
