"""Reading what the cluster says: the portal's view of a Volcano Job and of its pods.

Plain parsing of the objects the API server returns (a watch event's or a list's), without
the database: :func:`job_view` and :func:`pod_view` return None for an object the portal does
not own. ``clusters.status`` applies these views to the portal's jobs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from clusters.bindings import (
    job_uuid_of,
    replica_of,
)
from clusters.devices import pod_device
from portal.models import JobState
from rules import volcano

__all__ = ["Fact", "JobView", "PodView", "job_view", "pod_view"]

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
# The kubelet's reason for a pod killed at its activeDeadlineSeconds (the job's max runtime).
DEADLINE_EXCEEDED = "DeadlineExceeded"


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


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
    attempt: int | None = None
    """The run it was created for (``gpupool.dev/attempt``); None: made before the label."""


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
        attempt=volcano.attempt_of(meta.get("labels") or {}),
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
    ready: bool = False
    """The pod's ``Ready`` condition is True: it passes its readiness probe (a Service's
    endpoint)."""
    attempt: int | None = None
    """The run whose Volcano Job made it (``gpupool.dev/attempt``); None: made before the
    label existed, taken as the current run's."""
    restarts: int = 0
    """Times its containers restarted in place: only then does the kubelet keep a previous
    run's log (``kubectl logs --previous``)."""
    device: str = ""
    """For a share: the device its scheduler placed it on (``clusters.devices.pod_device``),
    "" when it has not said."""

    def of_attempt(self, number: int) -> bool:
        """Whether the pod belongs to run ``number`` of its job: an earlier run's pods can
        outlive it (Terminating on a node that died) beside the next run's."""
        return self.attempt is None or self.attempt == number

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
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (obj.get("status") or {}).get("conditions") or []
        ),
        attempt=volcano.attempt_of(labels),
        device=pod_device(obj) if node else "",
        restarts=sum(
            int(cs.get("restartCount") or 0)
            for cs in (obj.get("status") or {}).get("containerStatuses") or []
        ),
    )
