"""Runtime records the simulator keeps beside the stored objects.

The store holds what the API serves; these records hold what the controllers need to decide
quickly (a job's pods, a gang's reservation, a pod's timers) without re-reading and parsing
objects on every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubesim.scheduler import (
    PodConstraints,
)

TERMINAL_JOB_PHASES = frozenset({"Completed", "Failed", "Terminated"})
ACTIVE_JOB_PHASES = frozenset({"Pending", "Running"})
JOB_ACTIONS = frozenset(
    {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
)
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Namespaces of what the cluster's admin installed (Volcano): created on start, kept when the
# API server "loses state", but deletable like any namespace.
INSTALLED_NAMESPACES = ("volcano-system", "gpu-operator")
STEP_SECONDS = 0.005  # work per step before the lock (and the GIL) go back to API threads
STEP_SECONDS_UNDER_LOAD = 0.001  # the slice while API requests keep arriving
API_BUSY_SECONDS = 0.02  # the API counts as busy this long after a request
QUEUE_PUBLISH_SECONDS = 1.0  # Queue status is published at least this often while busy
QUEUE_QUIET_SECONDS = 0.25  # ... and at once when the API has been idle this long


@dataclass
class TaskInfo:
    """One task of a Volcano Job, parsed once per job version."""

    name: str
    replicas: int
    min_available: int
    template: dict[str, Any]
    policies: list[dict[str, Any]]
    req: dict[str, int]
    constraints: PodConstraints
    base: tuple[Any, Any] | None = None
    shape: Any = None  # (template signature, requests): equal shapes schedule alike


@dataclass
class PodRuntime:
    """The simulator's view of a pod (the API view is the stored object)."""

    key: tuple[str, str]
    uid: str
    job: JobRuntime | None
    task: str
    index: int
    req: dict[str, int]
    constraints: PodConstraints
    queue: str
    scheduler_name: str
    restart_policy: str
    shape: Any = None
    state: str = "pending"  # pending|bound|running|waiting|succeeded|failed
    node: str | None = None
    gen: int = 0  # bumps invalidate outstanding timers
    deleting: bool = False
    # Deleted while its node was unreachable: Terminating until a kubelet confirms the end
    # (the node comes back), or the pod GC force-deletes it (Node deleted, out-of-service).
    unconfirmed: bool = False
    killed_by_controller: bool = False
    restarts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    last_fit_error: str | None = None
    devices: dict[str, list[int]] = field(default_factory=dict)
    """Device numbers per GPU resource the kubelet gave the pod (what nvidia-smi lists)."""
    history: list[tuple[float, float | None, int | None, str | None]] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed."""
        return self.state in ("succeeded", "failed")

    @property
    def holds_resources(self) -> bool:
        """Bound to a node and not finished."""
        return self.node is not None and not self.terminal


@dataclass
class Gang:
    """The scheduler's view of a PodGroup."""

    job: JobRuntime
    pg_name: str
    queue: str
    min_member: int
    min_resources: dict[str, int]
    seq: int
    phase: str = "Pending"  # Pending | Inqueue | Running | Completed
    reserved: bool = False
    blocked_epoch: int = -1
    message: str | None = None
    reason: str | None = None


@dataclass
class JobRuntime:
    """The job controller's cache of one Volcano Job."""

    key: tuple[str, str]
    uid: str
    queue: str
    scheduler_name: str
    tasks: list[TaskInfo]
    min_available: int
    min_success: int | None
    max_retry: int
    policies: list[dict[str, Any]]
    ttl: int | None
    plugins: dict[str, Any]
    seq: int
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    phase_since: float = 0.0
    version: int = 0
    retry_count: int = 0
    pods: dict[str, PodRuntime] = field(default_factory=dict)
    inbox: list[tuple[str, PodRuntime]] = field(default_factory=list)
    gang: Gang | None = None
    conditions: list[dict[str, str]] = field(default_factory=list)
    running_since: float | None = None
    ttl_armed: bool = False


@dataclass
class QueueState:
    """Capability, state and usage of one Volcano Queue."""

    name: str
    state: str = "Open"
    capability: dict[str, int] | None = None
    allocated: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)
    parent: str | None = None


@dataclass
class Stats:
    """Counters for the benchmark and the control endpoint."""

    pods_created: int = 0
    pods_bound: int = 0
    pods_finished: int = 0
    scheduling_cycles: int = 0
    scheduling_seconds: float = 0.0  # CPU time of the scheduling cycles (thread time)
    steps: int = 0
    step_seconds: float = 0.0  # CPU time of all simulation steps (thread time)
    timers_fired: int = 0
    events_recorded: int = 0


def add_resources(target: dict[str, int], req: dict[str, int], sign: int = 1) -> None:
    for name, value in req.items():
        target[name] = target.get(name, 0) + sign * value


def duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def is_ready(node: dict[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def pod_phase(pod: PodRuntime) -> str:
    return {
        "pending": "Pending",
        "bound": "Pending",
        "waiting": "Pending",
        "running": "Running",
        "succeeded": "Succeeded",
        "failed": "Failed",
    }[pod.state]
