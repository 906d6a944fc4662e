"""No job holds GPUs past its bound: the max runtime, and pods that cannot start.

Run by beat every ``GPUPOOL_DEADLINES_INTERVAL`` seconds (``clusters.enforce_deadlines``). Each
decision is a compare-and-set through ``job_transition``, so a duplicated message or two
workers change nothing twice, and only the winner asks for the Volcano Job's deletion.

A stopped job keeps its GPUs until its Volcano Job is really gone: it goes through the same
states a cancel or a preemption does, and the clusters side finishes it once the delete is
confirmed (the cancel task, the watcher's DELETED event or the reconcile, whichever is first;
the reconcile also re-sends a delete whose message was lost).

Max runtime
    A RUNNING job whose first start (``started_at``) lies more than ``max_runtime_seconds``
    plus ``GPUPOOL_MAX_RUNTIME_GRACE_SECONDS`` ago goes RUNNING → CANCELLING with reason
    ``MaxRuntimeExceeded``, and ends FAILED with that reason. The pods' own
    ``activeDeadlineSeconds`` usually ends the job first (the kubelet fails the pod with
    ``DeadlineExceeded``, Volcano terminates the job, and the portal reports that as
    ``MaxRuntimeExceeded`` too); this is the backstop for what the pod deadline does not see:
    a gang restarted after an eviction gets fresh pod deadlines, and a cluster may not enforce
    them at all.

Pods that cannot start
    Counted from the moment the job's pods were last asked to start: its entry into SUBMITTED,
    or, for a RUNNING job whose Volcano Job went back to Pending (a gang restart after an
    eviction), that restart. The causes are the pod-level facts ``clusters.status`` already
    records on the timeline.

    * ``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``, ``CreateContainerConfigError``,
      ``CreateContainerError``: FAILED with that reason once the problem has lasted
      ``GPUPOOL_START_FAILURE_SECONDS``. Only the user can fix an image name, a registry
      credential or a missing ConfigMap; another cluster or another try would fail the same way.
    * No replica bound to a node for ``GPUPOOL_UNSCHEDULABLE_SECONDS`` (Volcano could not place
      the gang, or did not enqueue its PodGroup): requeued (→ PREEMPTING → QUEUED, reason
      ``Unschedulable``, place in line kept), because the portal admitted it on books the
      cluster disagreed with, and the next admission may pick other nodes or another cluster.
      After ``GPUPOOL_UNSCHEDULABLE_REQUEUES`` such requeues the job ends FAILED
      ``Unschedulable`` instead of looping.

    A pod that is merely slow (a large image still being pulled, ``ContainerCreating``) is bound
    and has no problem fact, so it is left alone; its pod deadline still applies.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from clusters.models import VolcanoJobRecord
from portal.jobs.state import job_transition
from portal.models import Job, JobEvent, JobState

log = logging.getLogger(__name__)

__all__ = [
    "FATAL_START_PROBLEMS",
    "MAX_RUNTIME_REASON",
    "UNSCHEDULABLE_REASON",
    "DeadlineResult",
    "deadlines_enforce",
]

S = JobState
MAX_RUNTIME_REASON = "MaxRuntimeExceeded"
UNSCHEDULABLE_REASON = "Unschedulable"
RESTARTED_REASONS = ("VolcanoRestarting", "PodsPending")
FATAL_START_PROBLEMS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
NOT_STARTED_PHASES = ("", "Pending", "Restarting")


@dataclass
class DeadlineResult:
    """What one pass decided: jobs whose Volcano Job must be deleted (``cancel``: they end
    FAILED) or evicted and requeued (``evict``)."""

    cancel: list[int] = field(default_factory=list)
    evict: list[int] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        return f"{len(self.cancel)} stopped, {len(self.evict)} requeued"

    def stop(self, job_id: int, expected: str, *, requeue: bool, reason: str, message: str) -> None:
        """Move the job to CANCELLING (it ends FAILED) or PREEMPTING (it is requeued) and note
        its Volcano Job for deletion, unless another writer moved it first."""
        if job_transition(
            job_id=job_id,
            expected=expected,
            to=S.PREEMPTING if requeue else S.CANCELLING,
            reason=reason,
            message=message,
        ):
            (self.evict if requeue else self.cancel).append(job_id)
            self.reasons[job_id] = reason


def _seconds(value: float) -> str:
    value = int(value)
    if value >= 3600 and value % 60 == 0:
        hours, minutes = divmod(value // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if value >= 60 and value % 60 == 0:
        return f"{value // 60} min"
    return f"{value} s"


def deadlines_enforce(*, now: dt.datetime | None = None) -> DeadlineResult:
    """One pass over the jobs that hold GPUs on a cluster; see the module's docstring."""
    now = now or timezone.now()
    result = DeadlineResult()
    _max_runtime(now, result)
    _start_failures(now, result)
    return result


# ---------------------------------------------------------------------------------------------
# Max runtime
# ---------------------------------------------------------------------------------------------
def _max_runtime(now: dt.datetime, result: DeadlineResult) -> None:
    grace = dt.timedelta(seconds=settings.GPUPOOL_MAX_RUNTIME_GRACE_SECONDS)
    rows = Job.objects.filter(
        state=S.RUNNING, started_at__isnull=False, started_at__lt=now - grace
    ).values_list("pk", "started_at", "max_runtime_seconds")
    for pk, started_at, runtime in rows:
        limit = dt.timedelta(seconds=runtime)
        if started_at + limit + grace > now:
            continue
        ran = (now - started_at).total_seconds()
        message = (
            f"The job ran {_seconds(ran)}, past its max runtime of {_seconds(runtime)} "
            f"(plus {_seconds(grace.total_seconds())} grace); the portal stopped it and deletes "
            "its Volcano Job."
        )
        result.stop(pk, S.RUNNING, requeue=False, reason=MAX_RUNTIME_REASON, message=message)


# ---------------------------------------------------------------------------------------------
# Pods that cannot start
# ---------------------------------------------------------------------------------------------
def _start_failures(now: dt.datetime, result: DeadlineResult) -> None:
    fatal_after = dt.timedelta(seconds=settings.GPUPOOL_START_FAILURE_SECONDS)
    unschedulable_after = dt.timedelta(seconds=settings.GPUPOOL_UNSCHEDULABLE_SECONDS)
    soonest = now - min(fatal_after, unschedulable_after)
    candidates = Job.objects.filter(
        Q(state=S.SUBMITTED, state_changed_at__lte=soonest)
        | Q(state=S.RUNNING, volcano__phase__in=NOT_STARTED_PHASES[1:])
    ).select_related("volcano", "cluster")
    for job in candidates:
        record: VolcanoJobRecord | None = getattr(job, "volcano", None)
        if job.pk in result.reasons or record is None:
            continue
        since = _start_asked_at(job)
        facts = list(
            JobEvent.objects.filter(job_id=job.pk, created_at__gte=since, from_state=F("to_state"))
            .filter(reason__in=[*FATAL_START_PROBLEMS, UNSCHEDULABLE_REASON])
            .order_by("created_at", "id")
            .values("reason", "message", "created_at")
        )
        fatal = [f for f in facts if f["reason"] in FATAL_START_PROBLEMS]
        if fatal and now - fatal[0]["created_at"] >= fatal_after:
            _fail_start(job, fatal, now, result)
        elif not _any_bound(record) and now - since >= unschedulable_after:
            unschedulable = [f for f in facts if f["reason"] == UNSCHEDULABLE_REASON]
            _unschedulable(job, unschedulable, now - since, now, result)


def _start_asked_at(job: Job) -> dt.datetime:
    """When the job's pods were last asked to start: its entry into SUBMITTED, or the latest
    gang restart of a RUNNING job."""
    if job.state == S.SUBMITTED:
        return job.state_changed_at
    restarted = (
        JobEvent.objects.filter(job_id=job.pk, reason__in=RESTARTED_REASONS)
        .order_by("-created_at", "-id")
        .values_list("created_at", flat=True)
        .first()
    )
    return max(restarted or job.state_changed_at, job.state_changed_at)


def _any_bound(record: VolcanoJobRecord) -> bool:
    pods: dict[str, Any] = record.pods or {}
    return any(entry.get("node") for entry in pods.values())


def _fail_start(
    job: Job, fatal: list[dict[str, Any]], now: dt.datetime, result: DeadlineResult
) -> None:
    latest = fatal[-1]
    lasted = (now - fatal[0]["created_at"]).total_seconds()
    message = (
        f"The job's pods could not start for {_seconds(lasted)}: {latest['message']}. The portal "
        "stopped it and deletes its Volcano Job; fix the image or its configuration and submit "
        "again."
    )
    result.stop(job.pk, job.state, requeue=False, reason=str(latest["reason"]), message=message)


def _unschedulable(
    job: Job,
    facts: list[dict[str, Any]],
    waited: dt.timedelta,
    now: dt.datetime,
    result: DeadlineResult,
) -> None:
    said = f" {facts[-1]['message']}." if facts else ""
    requeues = JobEvent.objects.filter(
        job_id=job.pk, to_state=S.PREEMPTING, reason=UNSCHEDULABLE_REASON
    ).count()
    limit = settings.GPUPOOL_UNSCHEDULABLE_REQUEUES
    waited_text = _seconds(waited.total_seconds())
    if requeues < limit:
        message = (
            f"No replica was placed on a node of {job.cluster or 'the cluster'} within "
            f"{waited_text}.{said} The job is requeued with its place in line "
            f"(requeue {requeues + 1} of at most {limit})."
        )
        result.stop(job.pk, job.state, requeue=True, reason=UNSCHEDULABLE_REASON, message=message)
        return
    message = (
        f"No replica was placed on a node within {waited_text}, after {requeues} requeue(s) for "
        f"the same reason.{said} The portal stopped it and deletes its Volcano Job."
    )
    result.stop(job.pk, job.state, requeue=False, reason=UNSCHEDULABLE_REASON, message=message)
