"""Following Volcano Jobs and their pods until the portal job ends.

Two paths feed the same functions. The watcher (``clusters.watch``) applies each event as it
arrives, within a second or so; the periodic reconcile (:func:`cluster_reconcile`) lists
everything the portal owns on a cluster and applies the lot, so a dropped event, a watcher
that was down or a 410 gap is healed on the next round. Every change is a compare-and-set
through ``job_transition``, so the two paths, or two reconciles, can meet without harm.

Volcano phase → portal state
    ``Pending`` keeps SUBMITTED. ``Running`` and ``Completing`` mean RUNNING. ``Completed`` is
    SUCCEEDED; ``Failed`` and ``Terminated`` are FAILED, with Volcano's reason and the last
    pod-level problem in the message. ``Restarting``, ``Aborting``, ``Aborted`` and
    ``Terminating`` are noted on the timeline and change nothing. Any other phase is logged
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
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters import volcano
from clusters.bindings import (
    FOLLOWED_STATES,
    job_uuid_of,
    node_plans_apply,
    pod_bindings,
    replica_of,
)
from clusters.dispatch import job_event_record, submission_uid
from clusters.kube import KubeError
from clusters.models import Cluster, VolcanoJobRecord
from clusters.services import ClusterUnavailable, cluster_client
from portal.jobs.state import cancelling_end, job_transition, preempting_end
from portal.models import TERMINAL_STATES, Job, JobState

log = logging.getLogger(__name__)

__all__ = [
    "JobView",
    "PodView",
    "ReconcileResult",
    "cluster_reconcile",
    "job_status_apply",
    "job_view",
    "pod_view",
    "pods_apply",
]

S = JobState
RUNNING_PHASES = frozenset({"Running", "Completing"})
TERMINAL_PHASES = {"Completed": S.SUCCEEDED, "Failed": S.FAILED, "Terminated": S.FAILED}
NOTED_PHASES = frozenset({"Restarting", "Aborting", "Aborted", "Terminating"})
KNOWN_PHASES = frozenset({"", "Pending", *RUNNING_PHASES, *TERMINAL_PHASES, *NOTED_PHASES})
WAITING_PROBLEMS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
LOST_REASONS = frozenset(
    {"NodeLost", "Evicted", "Preempting", "Terminated", "UnexpectedAdmissionError"}
)
MAX_REPORTED = 300
# The kubelet's reason for a pod killed at its activeDeadlineSeconds (the job's max runtime).
DEADLINE_EXCEEDED = "DeadlineExceeded"
MAX_RUNTIME_REASON = "MaxRuntimeExceeded"
STALE_AFTER = dt.timedelta(seconds=60)  # a task message for a job this old is presumed lost


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _clamp(moment: dt.datetime | None, now: dt.datetime) -> dt.datetime:
    """A cluster's timestamp, but never in the portal's future (clocks drift; kubesim runs
    fast)."""
    return min(moment, now) if moment else now


# ---------------------------------------------------------------------------------------------
# Reading cluster objects
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobView:
    """What the portal needs from one Volcano Job."""

    job_uuid: uuid.UUID
    namespace: str
    name: str
    uid: str
    submission_uid: str
    phase: str
    reason: str
    message: str
    retry_count: int
    running_since: dt.datetime | None
    finished_at: dt.datetime | None
    deleting: bool


def job_view(obj: dict[str, Any]) -> JobView | None:
    """The portal's view of a Volcano Job, or None for an object the portal does not own."""
    meta = obj.get("metadata") or {}
    job_uuid = job_uuid_of(meta.get("labels") or {})
    if job_uuid is None:
        return None
    status = obj.get("status") or {}
    state = status.get("state") or {}
    phase = str(state.get("phase") or "")
    running_since = None
    for condition in status.get("conditions") or []:
        if condition.get("status") == "Running":
            running_since = _time(condition.get("lastTransitionTime"))
            break
    return JobView(
        job_uuid=job_uuid,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        submission_uid=str(
            (meta.get("annotations") or {}).get(volcano.ANNOTATION_SUBMISSION_UID) or ""
        ),
        phase=phase,
        reason=str(state.get("reason") or ""),
        message=str(state.get("message") or ""),
        retry_count=int(status.get("retryCount") or 0),
        running_since=running_since,
        finished_at=_time(state.get("lastTransitionTime")) if phase in TERMINAL_PHASES else None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Fact:
    """A pod-level fact worth one JobEvent; ``key`` makes it happen once."""

    key: str
    reason: str
    message: str


@dataclass(frozen=True)
class PodView:
    job_uuid: uuid.UUID
    name: str
    uid: str
    replica: int | None
    node: str
    phase: str
    started_at: dt.datetime | None
    facts: tuple[Fact, ...] = ()

    @property
    def problem(self) -> str:
        """The latest problem worth putting in a FAILED job's message."""
        return self.facts[-1].message if self.facts else ""


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _pod_facts(
    pod: dict[str, Any], who: str, uid: str, node: str
) -> tuple[list[Fact], dt.datetime | None]:
    status = pod.get("status") or {}
    facts: list[Fact] = []
    started: dt.datetime | None = None
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = str(condition.get("message") or "no node fits")
            # Keyed by the message, not the pod: a gang of 64 gets one event, not 64.
            facts.append(
                Fact(
                    f"unschedulable:{_short(message)}",
                    "Unschedulable",
                    f"The job's pods cannot be scheduled: {message}",
                )
            )
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "Disrupted")
            facts.append(
                Fact(
                    f"{uid}:disrupted:{reason}",
                    "PodDisrupted",
                    f"{who} is being stopped: {reason} {condition.get('message') or ''}".strip(),
                )
            )
    for cs in status.get("containerStatuses") or []:
        restarts = int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if state.get("running"):
            running_at = _time(state["running"].get("startedAt"))
            started = min(started, running_at) if started and running_at else running_at or started
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in WAITING_PROBLEMS:
            reason = str(waiting["reason"])
            detail = f": {waiting['message']}" if waiting.get("message") else ""
            facts.append(
                Fact(f"{uid}:waiting:{reason}:{restarts}", reason, f"{who} {reason}{detail}")
            )
        for when, terminated in (
            ("last", (cs.get("lastState") or {}).get("terminated")),
            ("now", state.get("terminated")),
        ):
            if not terminated:
                continue
            code = int(terminated.get("exitCode") or 0)
            reason = str(terminated.get("reason") or "")
            if reason == "OOMKilled":
                message = (
                    f"{who} was OOMKilled: it used more memory than its limit (exit code {code})"
                )
                fact_reason = "OOMKilled"
            elif code != 0:
                message = f"{who} exited with code {code}" + (f" ({reason})" if reason else "")
                fact_reason = "ExitCode"
            else:
                continue
            finished = terminated.get("finishedAt") or when
            facts.append(Fact(f"{uid}:exit:{finished}:{code}", fact_reason, message))
    reason = str(status.get("reason") or "")
    if reason in LOST_REASONS:
        where = f" on node {node}" if node else ""
        detail = f": {status['message']}" if status.get("message") else ""
        label = "NodeLost" if reason == "NodeLost" else reason
        facts.append(Fact(f"{uid}:lost:{reason}", label, f"{who} {reason}{where}{detail}"))
    if reason == DEADLINE_EXCEEDED:
        detail = str(status.get("message") or "active longer than its deadline")
        facts.append(
            Fact(
                f"{uid}:deadline",
                DEADLINE_EXCEEDED,
                f"{who} was stopped at the job's max runtime: {detail}",
            )
        )
    return facts, started


def pod_view(obj: dict[str, Any]) -> PodView | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    job_uuid = job_uuid_of(labels)
    if job_uuid is None:
        return None
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or name)
    replica = replica_of(labels)
    node = str((obj.get("spec") or {}).get("nodeName") or "")
    who = f"Replica {replica} ({name})" if replica is not None else f"Pod {name}"
    facts, started = _pod_facts(obj, who, uid, node)
    return PodView(
        job_uuid=job_uuid,
        name=name,
        uid=uid,
        replica=replica,
        node=node,
        phase=str((obj.get("status") or {}).get("phase") or ""),
        started_at=started,
        facts=tuple(facts),
    )


# ---------------------------------------------------------------------------------------------
# Applying what was read
# ---------------------------------------------------------------------------------------------
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
    pods = list(pods)
    if job.state not in FOLLOWED_STATES or not pods:
        return 0
    if plans:
        bound = {p.replica: p.node for p in pods if p.replica is not None and p.node}
        changed = node_plans_apply({job.public_id: bound}) if bound else {}
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
                previous = pod_map.get(str(pod.replica)) or {}
                entry["problem"] = pod.problem or previous.get("problem", "")
                pod_map[str(pod.replica)] = entry
        changed_record = written or pod_map != (record.pods or {})
        if changed_record:
            record.reported = reported[-MAX_REPORTED:]
            record.pods = pod_map
            record.seen_at = timezone.now()
            record.save(update_fields=["reported", "pods", "seen_at"])
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
        reason="Running",
        message=f"Volcano Job {view.name} is {view.phase}: all {job.replicas} replica(s) started.",
        updates={"started_at": started},
        now=now,
    )
    if won:
        job.state = S.RUNNING
    return won


def job_status_apply(
    *,
    job: Job,
    view: JobView | None,
    deleted: bool = False,
    now: dt.datetime | None = None,
) -> str:
    """Move ``job`` to where its Volcano Job says it is; returns what happened, in a word.

    ``view`` None with ``deleted`` means the object is gone (a DELETED event without body, or
    a reconcile that did not find it).
    """
    now = now or timezone.now()
    state = job.state
    if state in TERMINAL_STATES or state in (S.QUEUED, S.ADMITTED):
        return "ignored"
    record = _record_of(job)
    if view is not None and view.submission_uid != submission_uid(job):
        return "other-lineage"  # an object from another admission of this job: not ours
    gone = deleted or (view is None)
    # A stop keeps the job's GPUs counted until its Volcano Job is gone; then a user's cancel
    # ends CANCELLED, the portal's own stop (max runtime, pods that cannot start) FAILED with
    # its reason, and a preemption or requeue QUEUED.
    if state == S.CANCELLING:
        if gone:
            cancelling_end(job_id=job.pk, message="The Volcano Job was deleted.", now=now)
            return "cancelled"
        return "cancelling"
    if state == S.PREEMPTING:
        if gone:
            preempting_end(job_id=job.pk, now=now)
            return "requeued"
        return "preempting"
    # SUBMITTED or RUNNING from here on.
    if record is None and view is not None:
        record = _record_from_view(job, view, now)
    elif record is not None and view is not None:
        VolcanoJobRecord.objects.filter(pk=record.pk).update(
            phase=view.phase, uid=view.uid or record.uid, seen_at=now
        )
    if gone and (view is None or view.phase not in TERMINAL_PHASES):
        last = f" (last phase {view.phase or 'unknown'})" if view is not None else ""
        name = view.name if view is not None else (record.name if record else job.volcano_job_name)
        job_transition(
            job_id=job.pk,
            expected=(S.SUBMITTED, S.RUNNING),
            to=S.FAILED,
            reason="VolcanoJobDeleted",
            message=f"The cluster {job.cluster} lost the Volcano Job {name}{last}: it is gone "
            "and the portal did not delete it (someone deleted it, or the cluster lost its "
            "state, e.g. an API server that restarted empty). The job is not requeued, since "
            "it may have done part of its work; submit it again to rerun it.",
            now=now,
        )
        VolcanoJobRecord.objects.filter(job_id=job.pk).update(deleted_at=now)
        return "vanished"
    assert view is not None
    phase = view.phase
    was_running = job.state == S.RUNNING
    if (phase in RUNNING_PHASES or phase in TERMINAL_PHASES) and job.state == S.SUBMITTED:
        _start(job, view, now)
    if phase == "Completed":
        job_transition(
            job_id=job.pk,
            expected=S.RUNNING,
            to=S.SUCCEEDED,
            reason="Succeeded",
            message=f"Volcano Job {view.name} completed.",
            updates={"finished_at": _clamp(view.finished_at, now)},
            now=now,
        )
        return "succeeded"
    if phase in ("Failed", "Terminated"):
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
            reason=MAX_RUNTIME_REASON if deadline else f"Volcano{phase}",
            message=message,
            updates={"finished_at": _clamp(view.finished_at, now)},
            now=now,
        )
        return "failed"
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
        return "noted"
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
        return "restarting"
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
        return "unknown-phase"
    return "unchanged"


# ---------------------------------------------------------------------------------------------
# The periodic reconcile: the truth
# ---------------------------------------------------------------------------------------------
@dataclass
class ReconcileResult:
    ok: bool = True
    message: str = ""
    jobs: int = 0
    objects: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    redispatched: list[int] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    plans_corrected: int = 0


def followed_jobs(cluster: Cluster) -> dict[uuid.UUID, Job]:
    jobs = Job.objects.filter(cluster=cluster, state__in=FOLLOWED_STATES).select_related(
        "team", "cluster", "gpu_model", "volcano"
    )
    return {j.public_id: j for j in jobs}


def cluster_reconcile(*, cluster: Cluster, now: dt.datetime | None = None) -> ReconcileResult:
    """List everything the portal owns on ``cluster`` and bring every followed job in line.

    The jobs are read *before* the lists: a job SUBMITTED by then had its object created
    earlier still, so an object missing from the later list really is gone.
    """
    from clusters import tasks  # the reconcile re-enqueues work whose message was lost

    now = now or timezone.now()
    result = ReconcileResult()
    jobs = followed_jobs(cluster)
    try:
        client = cluster_client(cluster)
        objects, _ = client.list_jobs_with_version(label_selector=volcano.managed_selector())
        pod_objects, _ = client.list_pods_with_version(label_selector=volcano.managed_selector())
    except (ClusterUnavailable, KubeError) as exc:
        message = exc.message if isinstance(exc, KubeError) else str(exc)
        Cluster.objects.filter(pk=cluster.pk).update(reconcile_error=message[:2000])
        return ReconcileResult(ok=False, message=message)
    views = {v.job_uuid: v for v in (job_view(o) for o in objects) if v is not None}
    pods: dict[uuid.UUID, list[PodView]] = defaultdict(list)
    for obj in pod_objects:
        pod = pod_view(obj)
        if pod is not None:
            pods[pod.job_uuid].append(pod)
    result.jobs, result.objects = len(jobs), len(views)
    # Every followed job's plan follows its pods' bindings, in one pass, before anything else.
    corrected = node_plans_apply(
        {u: b for u, b in pod_bindings(pod_objects).items() if u in jobs}, cluster_id=cluster.pk
    )
    result.plans_corrected = len(corrected)
    for job in jobs.values():
        if job.pk in corrected:
            job.node_plan = corrected[job.pk]
    stale = now - STALE_AFTER
    for job_uuid, job in jobs.items():
        view = views.get(job_uuid)
        if job.state == S.ADMITTED:
            if _dispatch_presumed_lost(job, stale):
                # Stamped, so the next reconcile (30 s on) does not send a second message while
                # this one waits in a long queue.
                Job.objects.filter(pk=job.pk, state=S.ADMITTED).update(dispatch_next_at=now)
                tasks.dispatch_job_enqueue([job.pk])
                result.redispatched.append(job.pk)
            continue
        if view is not None:
            pods_apply(job=job, pods=pods.get(job_uuid, ()), plans=False)
        outcome = job_status_apply(job=job, view=view, deleted=view is None, now=now)
        result.outcomes[outcome] += 1
        if view is not None and job.state_changed_at < stale:
            if outcome == "cancelling":
                tasks.cancel_job_enqueue(job.pk)
            elif outcome == "preempting":
                tasks.evict_job_enqueue(job.pk)
    _delete_orphans(cluster, client, views, jobs, result)
    Cluster.objects.filter(pk=cluster.pk).update(reconciled_at=now, reconcile_error="")
    result.message = f"{result.jobs} jobs, {result.objects} Volcano Jobs; " + ", ".join(
        f"{k} {v}" for k, v in sorted(result.outcomes.items())
    )
    return result


def _dispatch_presumed_lost(job: Job, stale: dt.datetime) -> bool:
    """Admitted long ago, and no dispatch attempted or due recently: its message was lost. A
    job waiting out a backoff, or whose attempt is slow, is not, and a second dispatch beside
    it would only double the load on a cluster that asked for less."""
    last = max(job.state_changed_at, job.dispatch_next_at or job.state_changed_at)
    return last < stale


def _delete_orphans(
    cluster: Cluster,
    client: Any,
    views: dict[uuid.UUID, JobView],
    followed: dict[uuid.UUID, Job],
    result: ReconcileResult,
) -> None:
    """Delete Volcano Jobs left behind by cancelled or requeued portal jobs.

    Finished jobs keep theirs (logs stay readable until ``ttlSecondsAfterFinished``), and an
    object whose job id this portal does not know is someone else's: never touched.
    """
    loose = [u for u in views if u not in followed]
    if not loose:
        return
    states = dict(
        Job.objects.filter(public_id__in=loose, cluster=cluster).values_list("public_id", "state")
    )
    requeued = dict(
        Job.objects.filter(public_id__in=loose, state=S.QUEUED).values_list("public_id", "state")
    )
    for job_uuid in loose:
        state = states.get(job_uuid) or requeued.get(job_uuid)
        if state not in (S.CANCELLED, S.QUEUED):
            continue
        view = views[job_uuid]
        try:
            client.delete_job(view.namespace, view.name, uid=view.uid or None)
            result.orphans_deleted.append(view.name)
        except KubeError as exc:
            if not exc.not_found:
                log.warning("could not delete orphan %s: %s", view.name, exc.message)
