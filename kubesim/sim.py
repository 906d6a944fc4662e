"""The simulated cluster: Volcano job controller, Volcano scheduler, kubelet and node events.

One :class:`Simulation` owns the store's lock and a timer heap on the simulated clock. Work is
event-driven: the store calls :meth:`Simulation.on_event` for every write, which marks jobs,
queues or the scheduler *dirty*; :meth:`Simulation.step` then does a bounded amount of work
(fire due timers, reconcile dirty jobs, run one scheduling cycle, publish queue status) and
releases the lock so API requests are never starved. Nothing is polled and no step is
O(nodes x pods): jobs know their pods, nodes know their free resources, and blocked gangs are
not retried until capacity changes.

Semantics follow Volcano v1.15 (``pkg/controllers/job/state``) where the portal can observe
them; deliberate simplifications are listed in ``docs/kubesim.md``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubesim.clock import SimClock, rfc3339, rfc3339_micro
from kubesim.config import GPU_CATALOG, ClusterConfig, SimSettings, build_nodes
from kubesim.objects import (
    DURATION,
    EXIT_CODE,
    FAIL,
    FAIL_AFTER,
    FAIL_ATTEMPTS,
    LOG_LINES,
    annotation_float,
    clone,
    image_pull_fails,
    normalize_container,
    object_reference,
    owner_reference,
    pod_requests,
    qos_class,
    sleep_seconds,
)
from kubesim.quantity import format_milli, resource_list_format, resource_list_to_milli
from kubesim.resources import Types
from kubesim.scheduler import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    GangPod,
    PodConstraints,
    Scheduler,
)
from kubesim.store import Store, WatchEvent

log = logging.getLogger("kubesim")

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
STEP_SECONDS = 0.005  # work per step before the lock (and the GIL) go back to API threads


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
    state: str = "pending"  # pending|bound|running|waiting|succeeded|failed
    node: str | None = None
    gen: int = 0  # bumps invalidate outstanding timers
    deleting: bool = False
    killed_by_controller: bool = False
    restarts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    last_fit_error: str | None = None
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
    scheduling_seconds: float = 0.0
    steps: int = 0
    step_seconds: float = 0.0
    timers_fired: int = 0
    events_recorded: int = 0


def _add(target: dict[str, int], req: dict[str, int], sign: int = 1) -> None:
    for name, value in req.items():
        target[name] = target.get(name, 0) + sign * value


def _duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


class Simulation:
    """Controllers, scheduler and kubelet of one simulated cluster."""

    def __init__(self, config: ClusterConfig, store: Store, clock: SimClock, types: Types) -> None:
        self.config = config
        self.settings: SimSettings = config.simulation
        self.store = store
        self.clock = clock
        self.types = types
        self.lock = store.lock
        self.scheduler = Scheduler()
        self.stats = Stats()
        self.jobs: dict[tuple[str, str], JobRuntime] = {}
        self.pods: dict[tuple[str, str], PodRuntime] = {}
        self.queues: dict[str, QueueState] = {}
        self.gangs: dict[tuple[str, str], Gang] = {}  # gangs with scheduling work
        self.dirty_jobs: dict[tuple[str, str], None] = {}
        self.dirty_queues: set[str] = set()
        self.terminating_ns: set[str] = set()
        self.ns_dirty = False
        self._step_now: float | None = None
        self.sched_dirty = True
        self.capacity_epoch = 0
        self._timers: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._events: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._event_order: list[tuple[str, str, str]] = []
        self._event_head = 0
        self._ip = itertools.count(2)
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for rt in types.all:
            if rt.key not in store.collections:
                store.register(rt)
        store.listeners.append(self.on_event)
        self.busy: Callable[[], bool] = lambda: False  # set by the API: requests in flight
        self._node_ips: dict[str, str] = {}

    # ==================================================================================
    # bootstrap
    # ==================================================================================
    def bootstrap(self) -> None:
        """Create built-in namespaces, configured nodes, queues and namespaces."""
        with self.lock:
            for name in (*BUILTIN_NAMESPACES, *self.config.namespaces):
                if self.store.get(self.types.namespaces, "", name) is None:
                    self.store.create(self.types.namespaces, self.new_namespace(name))
            now = self.now_text()
            for node in build_nodes(self.config):
                node["status"]["conditions"] = self._node_conditions(True, now)
                self.store.create(self.types.nodes, node)
            for queue in [
                {"name": "root", "weight": 1},
                {"name": "default", "weight": 1},
                *self.config.queues,
            ]:
                if self.store.get(self.types.queues, "", queue["name"]) is None:
                    self.store.create(self.types.queues, self.new_queue(queue))
            self.settle()

    def new_namespace(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """A Namespace object as the apiserver would store it."""
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {**(labels or {}), "kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def new_queue(self, item: dict[str, Any]) -> dict[str, Any]:
        """A Queue object from a config entry (``name``, ``weight``, ``capability``...)."""
        spec: dict[str, Any] = {"weight": int(item.get("weight", 1)), "reclaimable": True}
        for key in ("capability", "deserved", "guarantee", "parent", "priority"):
            if key in item:
                spec[key] = clone(item[key])
        return {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": item["name"]},
            "spec": spec,
            "status": {"state": item.get("state", "Open")},
        }

    def _node_conditions(self, ready: bool, now: str) -> list[dict[str, str]]:
        ready_condition = (
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
            if ready
            else {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
            }
        )
        conditions = [
            {"type": t, "status": "False" if ready else "Unknown", "reason": r, "message": m}
            for t, r, m in (
                (
                    "MemoryPressure",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        if not ready:
            for condition in conditions:
                condition["reason"] = "NodeStatusUnknown"
                condition["message"] = "Kubelet stopped posting node status."
        out = [*conditions, ready_condition]
        for condition in out:
            condition["lastHeartbeatTime"] = now
            condition["lastTransitionTime"] = now
        return out

    # ==================================================================================
    # time and the loop
    # ==================================================================================
    def now(self) -> float:
        """Current simulated time (constant within one step, so a step is one instant)."""
        frozen = self._step_now
        return frozen if frozen is not None else self.clock.now()

    def now_text(self) -> str:
        """Current simulated time as an RFC 3339 timestamp."""
        return rfc3339(self.now())

    def at(self, due: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at simulated time ``due`` (under the lock)."""
        heapq.heappush(self._timers, (due, next(self._seq), fn, args))
        self.wake.set()

    def after(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` ``seconds`` of simulated time from now."""
        self.at(self.now() + max(seconds, 0.0), fn, *args)

    def has_work(self) -> bool:
        """Whether a zero-time step would do something."""
        return bool(
            self.dirty_jobs
            or self.dirty_queues
            or (self.sched_dirty and self.gangs)
            or (self._timers and self._timers[0][0] <= self.now())
            or self.ns_dirty
        )

    def step(self) -> bool:
        """Do one bounded batch of work; returns True when more is pending right now."""
        started = time.perf_counter()
        with self.lock:
            self.stats.steps += 1
            now = self._step_now = self.clock.now()
            try:
                self._step_once(now)
            finally:
                self._step_now = None
            more = self.has_work()
        self.stats.step_seconds += time.perf_counter() - started
        return more

    def _step_once(self, now: float) -> None:
        """Timers due by ``now``, dirty jobs, one scheduling cycle, namespaces, queues.

        Each phase stops when the step's time slice is used up and leaves the rest for the
        next step, so an API request never waits behind more than a few milliseconds of
        simulation (20,000 pods are created and bound in many small steps, not one).
        """
        deadline = time.perf_counter() + STEP_SECONDS
        fired = 0
        while self._timers and self._timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(self._timers)
            fn(*args)
            fired += 1
            if fired % 64 == 0 and time.perf_counter() > deadline:
                break
        self.stats.timers_fired += fired
        for _ in range(2):  # a reconcile may create pods that the scheduler then binds
            while self.dirty_jobs and time.perf_counter() <= deadline:
                key = next(iter(self.dirty_jobs))
                del self.dirty_jobs[key]
                job = self.jobs.get(key)
                if job is not None:
                    self._reconcile_job(job)
            if self.sched_dirty and self.gangs:
                self._schedule(deadline)
        if self.ns_dirty:
            self.ns_dirty = False
            self._namespace_gc()
        if self.dirty_queues:
            self._publish_queues()

    def settle(self, max_steps: int = 100_000) -> None:
        """Run zero-time work until nothing is left (timers in the future stay pending)."""
        with self.lock:
            for _ in range(max_steps):
                if not self.step():
                    return
        log.warning("kubesim: settle() gave up after %d steps", max_steps)

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward, firing every timer in order on the way."""
        with self.lock:
            target = self.now() + seconds
            self.settle()
            while self._timers and self._timers[0][0] <= target:
                self.clock.advance_to(self._timers[0][0])
                self.settle()
            self.clock.advance_to(target)
            self.settle()

    def start(self) -> None:
        """Run the loop in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kubesim-sim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop thread."""
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            # API requests go first: while any is in flight the simulation waits (at most
            # 50 ms), like a controller whose informer lags a busy apiserver. Bursts of
            # creates are then answered at API speed and the simulation catches up after.
            waited = 0
            while self.busy() and waited < 50:
                time.sleep(0.001)
                waited += 1
            try:
                more = self.step()
            except Exception:  # a bug must not kill the cluster; it is logged loudly
                log.exception("kubesim: simulation step failed")
                more = False
            if more:
                time.sleep(0)  # let API threads take the lock between batches
                continue
            with self.lock:
                wait = self.clock.wall_seconds_until(self._timers[0][0]) if self._timers else None
            self.wake.wait(0.5 if wait is None else min(max(wait, 0.0005), 0.5))
            self.wake.clear()

    # ==================================================================================
    # store events
    # ==================================================================================
    def on_event(self, rt: Any, event: WatchEvent) -> None:
        """React to a write (called by the store, under the lock)."""
        if rt is self.types.jobs:
            self._on_job_event(event)
        elif rt is self.types.nodes:
            if event.type == "DELETED":
                self.scheduler.remove_node(event.entry.obj["metadata"]["name"])
            else:
                old = event.old.obj if event.old else None
                new = event.entry.obj
                if (
                    old is None
                    or old.get("spec") != new.get("spec")
                    or old["metadata"].get("labels") != new["metadata"].get("labels")
                    or old.get("status", {}).get("allocatable")
                    != new.get("status", {}).get("allocatable")
                    or _ready(old) != _ready(new)
                ):
                    self.scheduler.upsert_node(new)
                    self._capacity_changed()
        elif rt is self.types.queues:
            self._on_queue_event(event)
        if not self.wake.is_set():
            self.wake.set()

    def _on_job_event(self, event: WatchEvent) -> None:
        obj = event.entry.obj
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if event.type == "ADDED":
            self._adopt_job(obj)
        elif event.type == "DELETED":
            job = self.jobs.pop(key, None)
            if job is not None and job.uid == obj["metadata"]["uid"]:
                self._gc_job(job)
        else:
            old = event.old.obj if event.old else {}
            if old.get("metadata", {}).get("generation") != obj["metadata"].get(
                "generation"
            ) or old.get("metadata", {}).get("deletionTimestamp") != obj["metadata"].get(
                "deletionTimestamp"
            ):
                job = self.jobs.get(key)
                if job is not None:
                    self._refresh_job_spec(job, obj)
                    self.dirty_jobs[key] = None

    def _on_queue_event(self, event: WatchEvent) -> None:
        obj = event.entry.obj
        name = obj["metadata"]["name"]
        if event.type == "DELETED":
            self.queues.pop(name, None)
            self._capacity_changed()
            return
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        state = self.queues.get(name)
        if state is None:
            state = self.queues[name] = QueueState(name)
            if not status.get("state"):
                # Volcano's queue controller opens a new queue; status is not client-settable
                # on create because the CRD has a status subresource.
                self.dirty_queues.add(name)
        capability = spec.get("capability")
        state.capability = resource_list_to_milli(capability) if capability else None
        state.state = status.get("state") or "Open"
        state.parent = spec.get("parent")
        if (
            event.old is None
            or event.old.obj.get("spec") != spec
            or ((event.old.obj.get("status") or {}).get("state") != status.get("state"))
        ):
            self._capacity_changed()

    def _capacity_changed(self) -> None:
        self.capacity_epoch += 1
        self.sched_dirty = True

    # ==================================================================================
    # jobs: cache
    # ==================================================================================
    def _parse_tasks(self, job: dict[str, Any]) -> list[TaskInfo]:
        tasks = []
        for index, task in enumerate(job["spec"].get("tasks") or []):
            template = task.get("template") or {}
            spec = template.get("spec") or {}
            replicas = int(task.get("replicas", 0))
            tasks.append(
                TaskInfo(
                    name=task.get("name") or f"default{index}",
                    replicas=replicas,
                    min_available=int(task.get("minAvailable", replicas)),
                    template=template,
                    policies=list(task.get("policies") or []),
                    req=pod_requests(spec),
                    constraints=PodConstraints.from_spec(spec),
                )
            )
        return tasks

    def _adopt_job(self, obj: dict[str, Any]) -> JobRuntime:
        meta, spec = obj["metadata"], obj["spec"]
        key = (meta["namespace"], meta["name"])
        tasks = self._parse_tasks(obj)
        job = JobRuntime(
            key=key,
            uid=meta["uid"],
            queue=spec.get("queue") or "default",
            scheduler_name=spec.get("schedulerName") or "volcano",
            tasks=tasks,
            min_available=int(spec.get("minAvailable", sum(t.replicas for t in tasks))),
            min_success=spec.get("minSuccess"),
            max_retry=int(spec.get("maxRetry", 3)),
            policies=list(spec.get("policies") or []),
            ttl=spec.get("ttlSecondsAfterFinished"),
            plugins=dict(spec.get("plugins") or {}),
            seq=next(self._seq),
            phase_since=self.now(),
        )
        status = obj.get("status") or {}
        job.phase = (status.get("state") or {}).get("phase") or "Pending"
        job.retry_count = int(status.get("retryCount", 0))
        job.version = int(status.get("version", 0))
        self.jobs[key] = job
        job.gang = Gang(
            job=job,
            pg_name=f"{meta['name']}-{meta['uid']}",
            queue=job.queue,
            min_member=job.min_available,
            min_resources=self._min_resources(job),
            seq=job.seq,
        )
        self.dirty_jobs[key] = None
        return job

    def _refresh_job_spec(self, job: JobRuntime, obj: dict[str, Any]) -> None:
        spec = obj["spec"]
        job.tasks = self._parse_tasks(obj)
        job.min_available = int(spec.get("minAvailable", sum(t.replicas for t in job.tasks)))
        if job.gang is not None:
            job.gang.min_member = job.min_available
            job.gang.min_resources = self._min_resources(job)
            job.gang.blocked_epoch = -1
        self.sched_dirty = True

    def _min_resources(self, job: JobRuntime) -> dict[str, int]:
        """Requests of the first ``minAvailable`` pods in task order (Volcano's minResources)."""
        total: dict[str, int] = {}
        remaining = job.min_available
        for task in job.tasks:
            take = min(task.replicas, remaining)
            for name, value in task.req.items():
                total[name] = total.get(name, 0) + value * take
            remaining -= take
        total.pop("pods", None)
        return total

    # ==================================================================================
    # jobs: controller
    # ==================================================================================
    def _job_obj(self, job: JobRuntime) -> dict[str, Any] | None:
        obj = self.store.get(self.types.jobs, *job.key)
        if obj is None or obj["metadata"]["uid"] != job.uid:
            return None
        return obj

    def _reconcile_job(self, job: JobRuntime) -> None:
        obj = self._job_obj(job)
        if obj is None:
            return
        if obj["metadata"].get("deletionTimestamp"):
            self._finalize_job(job, obj)
            return
        # 1. events -> policy actions (only while the job is Pending or Running)
        inbox, job.inbox = job.inbox, []
        for event, pod in inbox:
            if job.phase in ACTIVE_JOB_PHASES:
                action = self._policy_action(job, event, pod)
                if action is not None:
                    self._execute(job, action, pod)
        # 2. sync by phase
        phase = job.phase
        if phase in ACTIVE_JOB_PHASES:
            self._sync_pods(job)
            counts = self._counts(job)
            total = sum(t.replicas for t in job.tasks)
            if phase == "Pending" and job.min_available <= (
                counts["running"] + counts["succeeded"] + counts["failed"]
            ):
                self._set_phase(job, "Running")
            if job.phase == "Running" and total:
                if job.min_success is not None and counts["succeeded"] >= job.min_success:
                    self._set_phase(job, "Completed")
                elif counts["succeeded"] + counts["failed"] == total:
                    self._set_phase(job, self._finished_phase(job, counts))
        elif phase == "Restarting":
            if job.retry_count >= job.max_retry:
                self._kill(job, retain_terminal=False)
                self._set_phase(
                    job,
                    "Failed",
                    "RetryLimitExceeded",
                    f"job retried {job.retry_count} times (maxRetry {job.max_retry})",
                )
            elif not job.pods:
                job.version += 1
                self._reset_gang(job)
                self._set_phase(job, "Pending")
                self._sync_pods(job)
        elif phase in ("Aborting", "Terminating", "Completing") and not self._alive(job):
            self._set_phase(
                job,
                {"Aborting": "Aborted", "Terminating": "Terminated", "Completing": "Completed"}[
                    phase
                ],
            )
        if job.phase in TERMINAL_JOB_PHASES:
            self._kill(job, retain_terminal=True)
            self._finish_gang(job)
            if job.ttl is not None and not job.ttl_armed:
                job.ttl_armed = True
                self.after(float(job.ttl), self._ttl_expired, job)
        self._write_job_status(job, obj)
        self._write_podgroup(job)

    def _finished_phase(self, job: JobRuntime, counts: dict[str, int]) -> str:
        """Completed or Failed once every pod has finished (Volcano's running state rules)."""
        for task in job.tasks:
            done = sum(
                1 for p in job.pods.values() if p.task == task.name and p.state == "succeeded"
            )
            if (
                task.min_available
                and done < task.min_available
                and (job.min_available >= sum(t.min_available for t in job.tasks))
            ):
                return "Failed"
        if job.min_success is not None and counts["succeeded"] < job.min_success:
            return "Failed"
        return "Completed" if counts["succeeded"] >= job.min_available else "Failed"

    def _policy_action(self, job: JobRuntime, event: str, pod: PodRuntime) -> str | None:
        """The action of the first matching policy, task level before job level."""
        task = next((t for t in job.tasks if t.name == pod.task), None)
        for policies in ((task.policies if task else []), job.policies):
            for policy in policies:
                events = [policy["event"]] if policy.get("event") else []
                events += list(policy.get("events") or [])
                if event in events or "*" in events:
                    return str(policy.get("action"))
                code = policy.get("exitCode")
                if event == "PodFailed" and code is not None and code == pod.exit_code:
                    return str(policy.get("action"))
        return None

    def _execute(self, job: JobRuntime, action: str, pod: PodRuntime) -> None:
        self.record_event(
            self._job_obj(job), "Normal", "ExecuteAction", f"Start to execute action {action} "
        )
        if action == "RestartJob":
            self._kill(job, retain_terminal=False)
            job.retry_count += 1
            self._set_phase(job, "Restarting")
        elif action in ("RestartTask", "RestartPod"):
            victims = [
                p
                for p in job.pods.values()
                if (p.task == pod.task if action == "RestartTask" else p is pod)
            ]
            for victim in victims:
                self.delete_pod(victim, by_controller=True)
            job.retry_count += 1
            self._set_phase(job, "Restarting")
        elif action == "AbortJob":
            self._kill(job, retain_terminal=True)
            self._set_phase(job, "Aborting")
        elif action == "TerminateJob":
            self._kill(job, retain_terminal=True)
            self._set_phase(job, "Terminating")
        elif action == "CompleteJob":
            self._kill(job, retain_terminal=True)
            self._set_phase(job, "Completing")

    def _set_phase(self, job: JobRuntime, phase: str, reason: str = "", message: str = "") -> None:
        if job.phase == phase:
            return
        now = self.now()
        job.phase, job.reason, job.message, job.phase_since = phase, reason, message, now
        job.conditions.append({"status": phase, "lastTransitionTime": rfc3339(now)})
        del job.conditions[:-20]
        if phase == "Running" and job.running_since is None:
            job.running_since = now
        self.dirty_jobs[job.key] = None

    def _alive(self, job: JobRuntime) -> bool:
        return any(not p.terminal or p.deleting for p in job.pods.values())

    def _kill(self, job: JobRuntime, *, retain_terminal: bool) -> None:
        for pod in list(job.pods.values()):
            if retain_terminal and pod.terminal:
                continue
            if not pod.deleting:
                self.delete_pod(pod, by_controller=True)

    def _counts(self, job: JobRuntime) -> dict[str, int]:
        counts = dict.fromkeys(
            ("pending", "running", "succeeded", "failed", "terminating", "unknown"), 0
        )
        for pod in job.pods.values():
            if pod.deleting:
                counts["terminating"] += 1
            elif pod.state == "running":
                counts["running"] += 1
            elif pod.state == "succeeded":
                counts["succeeded"] += 1
            elif pod.state == "failed":
                counts["failed"] += 1
            else:
                counts["pending"] += 1
        return counts

    def _sync_pods(self, job: JobRuntime) -> None:
        """Create missing pods (once the PodGroup is Inqueue) and remove scaled-down ones."""
        gang = job.gang
        assert gang is not None
        volcano = job.scheduler_name == "volcano"
        if volcano and gang.phase == "Pending":
            self.gangs[job.key] = gang  # the enqueue step decides when pods may exist
            self.sched_dirty = True
            return
        obj = self._job_obj(job)
        if obj is None:
            return
        wanted = set()
        created = False
        for task in job.tasks:
            for index in range(task.replicas):
                name = f"{job.key[1]}-{task.name}-{index}"
                wanted.add(name)
                if name not in job.pods:
                    self._create_pod(job, obj, task, index)
                    created = True
        for name, pod in list(job.pods.items()):
            if name not in wanted and not pod.deleting:
                self.delete_pod(pod, by_controller=True)
        if created or any(p.state == "pending" and not p.deleting for p in job.pods.values()):
            gang.blocked_epoch = -1
            self.gangs[job.key] = gang
            self.sched_dirty = True

    def _pod_base(
        self, job: JobRuntime, obj: dict[str, Any], task: TaskInfo
    ) -> tuple[dict[str, str], dict[str, str], dict[str, Any], str]:
        """Labels, annotations, spec and QoS shared by every pod of a task (one job version).

        Built once per task and version; pods share these immutable sub-objects, which is
        what keeps creating 20,000 pods cheap.
        """
        gang_name = job.gang.pg_name if job.gang else ""
        cache_key = (job.version, job.retry_count, gang_name, job.queue)
        cached = task.base
        if cached is not None and cached[0] == cache_key:
            return cached[1]
        ns, job_name = job.key
        template = task.template
        tmeta = template.get("metadata") or {}
        spec = clone(template.get("spec") or {})
        job_annotations = obj["metadata"].get("annotations") or {}
        annotations = {
            **{k: v for k, v in job_annotations.items() if k.startswith("kubesim.gpupool.dev/")},
            **(tmeta.get("annotations") or {}),
        }
        for key in (
            "volcano.sh/preemptable",
            "volcano.sh/cooldown-time",
            "volcano.sh/revocable-zone",
            "volcano.sh/jdb-min-available",
            "volcano.sh/jdb-max-unavailable",
        ):
            if key in job_annotations:
                annotations.setdefault(key, job_annotations[key])
        annotations.update(
            {
                "scheduling.k8s.io/group-name": gang_name,
                "volcano.sh/job-name": job_name,
                "volcano.sh/queue-name": job.queue,
                "volcano.sh/task-spec": task.name,
                "volcano.sh/job-version": str(job.version),
                "volcano.sh/job-retry-count": str(job.retry_count),
                "volcano.sh/template-uid": f"{job_name}-{task.name}",
            }
        )
        job_labels = obj["metadata"].get("labels") or {}
        labels = {
            **(tmeta.get("labels") or {}),
            **{
                k: job_labels[k]
                for k in ("volcano.sh/preemptable", "volcano.sh/cooldown-time")
                if k in job_labels
            },
            "volcano.sh/job-name": job_name,
            "volcano.sh/job-namespace": ns,
            "volcano.sh/queue-name": job.queue,
            "volcano.sh/task-spec": task.name,
        }
        spec["containers"] = [normalize_container(c) for c in spec.get("containers") or []]
        if spec.get("initContainers"):
            spec["initContainers"] = [normalize_container(c) for c in spec["initContainers"]]
        spec.setdefault("schedulerName", job.scheduler_name)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        if obj["spec"].get("priorityClassName"):
            spec.setdefault("priorityClassName", obj["spec"]["priorityClassName"])
        tolerations = list(spec.get("tolerations") or [])
        for taint_key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
            if not any(t.get("key") == taint_key for t in tolerations):
                tolerations.append(
                    {
                        "key": taint_key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )
        spec["tolerations"] = tolerations
        base = (labels, annotations, spec, qos_class(spec))
        task.base = (cache_key, base)
        return base

    def _create_pod(self, job: JobRuntime, obj: dict[str, Any], task: TaskInfo, index: int) -> None:
        ns, job_name = job.key
        name = f"{job_name}-{task.name}-{index}"
        base_labels, base_annotations, base_spec, qos = self._pod_base(job, obj, task)
        spec = base_spec
        if job.plugins:
            spec = {**base_spec, "containers": [dict(c) for c in base_spec["containers"]]}
            self._apply_plugins(job, task, index, spec)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {**base_labels, "volcano.sh/task-index": str(index)},
                "annotations": {**base_annotations, "volcano.sh/task-index": str(index)},
                "ownerReferences": [owner_reference(obj)],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": qos},
        }
        created = self.store.create(self.types.pods, pod)
        runtime = PodRuntime(
            key=(ns, name),
            uid=created["metadata"]["uid"],
            job=job,
            task=task.name,
            index=index,
            req=task.req,
            constraints=task.constraints,
            queue=job.queue,
            scheduler_name=spec["schedulerName"],
            restart_policy=spec["restartPolicy"],
        )
        self.pods[runtime.key] = runtime
        job.pods[name] = runtime
        self.stats.pods_created += 1

    def _apply_plugins(
        self, job: JobRuntime, task: TaskInfo, index: int, spec: dict[str, Any]
    ) -> None:
        """The env, svc and pytorch controller plugins, reduced to their visible effects."""
        plugins = job.plugins
        job_name = job.key[1]
        env: list[dict[str, str]] = []
        if "env" in plugins:
            env += [
                {"name": "VK_TASK_INDEX", "value": str(index)},
                {"name": "VC_TASK_INDEX", "value": str(index)},
            ]
        if "svc" in plugins or "pytorch" in plugins or "mpi" in plugins:
            spec.setdefault("hostname", f"{job_name}-{task.name}-{index}")
            spec.setdefault("subdomain", job_name)
            for other in job.tasks:
                hosts = ",".join(
                    f"{job_name}-{other.name}-{i}.{job_name}" for i in range(other.replicas)
                )
                upper = other.name.upper().replace("-", "_")
                env += [
                    {"name": f"VC_{upper}_HOSTS", "value": hosts},
                    {"name": f"VC_{upper}_NUM", "value": str(other.replicas)},
                ]
        if "pytorch" in plugins:
            args = dict(a.lstrip("-").split("=", 1) for a in plugins["pytorch"] or [] if "=" in a)
            master, worker = args.get("master", "master"), args.get("worker", "worker")
            port = args.get("port", "23456")
            replicas = {t.name: t.replicas for t in job.tasks}
            world = replicas.get(master, 0) + replicas.get(worker, 0)
            rank = 0 if task.name == master else index + replicas.get(master, 0)
            env += [
                {"name": "MASTER_ADDR", "value": f"{job_name}-{master}-0.{job_name}"},
                {"name": "MASTER_PORT", "value": port},
                {"name": "WORLD_SIZE", "value": str(world)},
                {"name": "RANK", "value": str(rank)},
            ]
        if env:
            for container in spec["containers"]:
                names = {e.get("name") for e in container.get("env") or []}
                container["env"] = [
                    *(container.get("env") or []),
                    *(e for e in env if e["name"] not in names),
                ]

    def _write_job_status(self, job: JobRuntime, obj: dict[str, Any]) -> None:
        counts = self._counts(job)
        task_counts: dict[str, dict[str, dict[str, int]]] = {}
        for pod in job.pods.values():
            phase = _pod_phase(pod)
            bucket = task_counts.setdefault(pod.task, {"phase": {}})["phase"]
            bucket[phase] = bucket.get(phase, 0) + 1
        state: dict[str, Any] = {
            "phase": job.phase,
            "lastTransitionTime": rfc3339(job.phase_since),
        }
        if job.reason:
            state["reason"] = job.reason
        if job.message:
            state["message"] = job.message
        status: dict[str, Any] = {
            "state": state,
            "minAvailable": job.min_available,
            **counts,
            "retryCount": job.retry_count,
            "version": job.version,
            "taskStatusCount": task_counts,
            "conditions": list(job.conditions),
        }
        if job.running_since is not None:
            end = job.phase_since if job.phase in TERMINAL_JOB_PHASES else self.now()
            status["runningDuration"] = _duration_text(end - job.running_since)
        if "svc" in job.plugins:
            status["controlledResources"] = {"plugin-svc": "svc"}
        if obj.get("status") == status:
            return
        self.store.replace(
            self.types.jobs, {**obj, "metadata": dict(obj["metadata"]), "status": status}
        )

    def _finalize_job(self, job: JobRuntime, obj: dict[str, Any]) -> None:
        """Foreground deletion: kill pods, then drop the finalizer and the job."""
        self._kill(job, retain_terminal=False)
        if job.pods:
            self._write_job_status(job, obj)
            return
        self._drop_gang(job)
        finalizers = [
            f for f in obj["metadata"].get("finalizers") or [] if f != "foregroundDeletion"
        ]
        if finalizers:
            if finalizers != obj["metadata"].get("finalizers"):
                self.store.replace(
                    self.types.jobs,
                    {**obj, "metadata": {**obj["metadata"], "finalizers": finalizers}},
                )
            return
        self.jobs.pop(job.key, None)
        self.store.delete(self.types.jobs, *job.key)

    def _gc_job(self, job: JobRuntime) -> None:
        """Background deletion: the job is gone, its pods and PodGroup follow."""
        for pod in list(job.pods.values()):
            pod_obj = self.store.get(self.types.pods, *pod.key)
            owners = (pod_obj or {}).get("metadata", {}).get("ownerReferences") or []
            if any(o.get("uid") == job.uid for o in owners):
                if not pod.deleting:
                    self.delete_pod(pod, by_controller=True)
            else:
                pod.job = None  # orphaned
        self._drop_gang(job)
        self.dirty_jobs.pop(job.key, None)

    def _ttl_expired(self, job: JobRuntime) -> None:
        obj = self._job_obj(job)
        if obj is not None and job.phase in TERMINAL_JOB_PHASES:
            self.store.delete(self.types.jobs, *job.key)

    # ==================================================================================
    # PodGroups and the scheduler
    # ==================================================================================
    def _reset_gang(self, job: JobRuntime) -> None:
        gang = job.gang
        assert gang is not None
        self._release_reservation(gang)
        gang.phase = "Pending"
        gang.blocked_epoch = -1
        gang.message = gang.reason = None
        self.gangs[job.key] = gang
        self.sched_dirty = True

    def _finish_gang(self, job: JobRuntime) -> None:
        gang = job.gang
        if gang is not None and gang.phase != "Completed":
            self._release_reservation(gang)
            gang.phase = "Completed"
            self.gangs.pop(job.key, None)
            self.dirty_queues.add(gang.queue)

    def _drop_gang(self, job: JobRuntime) -> None:
        gang = job.gang
        if gang is None:
            return
        self._release_reservation(gang)
        self.gangs.pop(job.key, None)
        self.dirty_queues.add(gang.queue)
        pg = self.store.get(self.types.podgroups, job.key[0], gang.pg_name)
        if pg is not None:
            self.store.delete(self.types.podgroups, job.key[0], gang.pg_name)

    def _release_reservation(self, gang: Gang) -> None:
        if gang.reserved:
            queue = self.queues.get(gang.queue)
            if queue is not None:
                _add(queue.reserved, gang.min_resources, -1)
            gang.reserved = False
            self.sched_dirty = True

    def _write_podgroup(self, job: JobRuntime) -> None:
        gang = job.gang
        obj = self._job_obj(job)
        if gang is None or obj is None:
            return
        ns = job.key[0]
        counts = self._counts(job)
        bound = sum(1 for p in job.pods.values() if p.node is not None and not p.deleting)
        if gang.phase == "Inqueue" and bound >= gang.min_member and gang.min_member > 0:
            gang.phase = "Running"
            self._release_reservation(gang)
            self.dirty_queues.add(gang.queue)
        conditions = []
        if gang.message:
            conditions.append(
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": gang.reason or "NotEnoughResources",
                    "message": gang.message,
                    "transitionID": job.uid,
                    "lastTransitionTime": self.now_text(),
                }
            )
        elif gang.phase in ("Running", "Completed"):
            conditions.append(
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "tasks in gang are ready to be scheduled",
                    "message": "",
                    "transitionID": job.uid,
                    "lastTransitionTime": self.now_text(),
                }
            )
        status = {
            "phase": gang.phase,
            "running": counts["running"],
            "succeeded": counts["succeeded"],
            "failed": counts["failed"],
            "conditions": conditions,
        }
        existing = self.store.get(self.types.podgroups, ns, gang.pg_name)
        if existing is None:
            min_task = {t.name: t.min_available for t in job.tasks}
            pg = {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": gang.pg_name,
                    "namespace": ns,
                    "labels": dict(obj["metadata"].get("labels") or {}),
                    "annotations": dict(obj["metadata"].get("annotations") or {}),
                    "ownerReferences": [owner_reference(obj)],
                },
                "spec": {
                    "minMember": gang.min_member,
                    "minTaskMember": min_task,
                    "minResources": resource_list_format(gang.min_resources),
                    "queue": gang.queue,
                    **(
                        {"priorityClassName": obj["spec"]["priorityClassName"]}
                        if obj["spec"].get("priorityClassName")
                        else {}
                    ),
                },
                "status": status,
            }
            self.store.create(self.types.podgroups, pg)
            self.dirty_queues.add(gang.queue)
            return
        old_status = existing.get("status") or {}
        same_conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in old_status.get("conditions") or []
        ] == [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions]
        if same_conditions:
            status["conditions"] = old_status.get("conditions") or []
        spec = {
            **existing["spec"],
            "minMember": gang.min_member,
            "minResources": resource_list_format(gang.min_resources),
        }
        if old_status == status and spec == existing["spec"]:
            return
        if old_status.get("phase") != status["phase"]:
            self.dirty_queues.add(gang.queue)
        self.store.replace(
            self.types.podgroups,
            {**existing, "metadata": dict(existing["metadata"]), "spec": spec, "status": status},
        )

    def _schedule(self, deadline: float) -> None:
        """One Volcano cycle: enqueue PodGroups, then allocate pending gangs (until deadline)."""
        started = time.perf_counter()
        self.sched_dirty = False
        self.stats.scheduling_cycles += 1
        failed_shapes: dict[Any, str] = {}
        for key, gang in sorted(self.gangs.items(), key=lambda item: item[1].seq):
            job = gang.job
            if self.jobs.get(key) is not job or job.phase not in ACTIVE_JOB_PHASES:
                self.gangs.pop(key, None)
                continue
            if gang.blocked_epoch == self.capacity_epoch:
                continue
            volcano = job.scheduler_name == "volcano"
            if gang.phase == "Pending":
                if volcano and not self._enqueue(gang):
                    continue
                gang.phase = "Inqueue"
                self.dirty_jobs[key] = None
                self.dirty_queues.add(gang.queue)
                continue  # pods are created by the controller, then allocated
            pending = [p for p in job.pods.values() if p.state == "pending" and not p.deleting]
            if not pending:
                self.gangs.pop(key, None)
                continue
            pending.sort(key=lambda p: (self._task_order(job, p.task), p.index))
            ready = sum(1 for p in job.pods.values() if p.node is not None and not p.deleting)
            need = max(job.min_available - ready, 0) if volcano else 0
            shape = (
                tuple((p.constraints.signature, tuple(sorted(p.req.items()))) for p in pending),
                need,
                gang.queue,
            )
            if shape in failed_shapes:
                self._unschedulable(gang, pending, failed_shapes[shape], need)
                continue
            candidates, quota_error = self._within_capability(gang, pending, need)
            if quota_error:
                self._unschedulable(gang, pending, quota_error, need, reason="NotEnoughResources")
                continue
            placement = self.scheduler.place_gang(
                [GangPod(p.key, p.req, p.constraints) for p in candidates], need
            )
            if not placement.bound:
                message = placement.fit_error or "no nodes available"
                failed_shapes[shape] = message
                self._unschedulable(gang, pending, message, need)
                continue
            for gang_pod, node in placement.bound:
                self._bind(self.pods[gang_pod.key], node.name)
            if gang.phase == "Inqueue" and ready + len(placement.bound) >= gang.min_member:
                # allocated now counts these pods; keeping the reservation too would charge
                # the queue twice for the same gang
                gang.phase = "Running"
                self._release_reservation(gang)
                self.dirty_queues.add(gang.queue)
            gang.message = gang.reason = None
            self.dirty_jobs[key] = None
            if len(placement.bound) < len(pending):
                gang.blocked_epoch = self.capacity_epoch
            else:
                self.gangs.pop(key, None)
            if time.perf_counter() > deadline:
                self.sched_dirty = True  # the rest of the cycle runs in the next step
                break
        self.stats.scheduling_seconds += time.perf_counter() - started

    def _task_order(self, job: JobRuntime, task: str) -> int:
        for index, info in enumerate(job.tasks):
            if info.name == task:
                return index
        return len(job.tasks)

    def _enqueue(self, gang: Gang) -> bool:
        """Volcano's enqueue action: queue Open, capability and overcommit allow minResources."""
        queue = self.queues.get(gang.queue)
        message = None
        reason = "NotEnoughResources"
        if queue is None:
            message = f'queue "{gang.queue}" does not exist'
            reason = "QueueNotFound"
        elif queue.state != "Open":
            message = f'queue "{gang.queue}" is {queue.state}; only Open queues admit pod groups'
            reason = "QueueNotOpen"
        elif queue.capability is not None:
            for res, need in sorted(gang.min_resources.items()):
                cap = queue.capability.get(res)
                if cap is None:
                    continue
                used = queue.allocated.get(res, 0) + queue.reserved.get(res, 0)
                if used + need > cap:
                    message = (
                        f"queue {gang.queue} resource quota insufficient: {res} requested "
                        f"{format_milli(need, res)}, in use {format_milli(used, res)} of "
                        f"capability {format_milli(cap, res)}"
                    )
                    break
        if message is None:
            factor = self.settings.overcommit_factor
            reserved_total: dict[str, int] = {}
            for q in self.queues.values():
                _add(reserved_total, q.reserved)
            for res, need in sorted(gang.min_resources.items()):
                idle = (
                    math.floor(self.scheduler.total.get(res, 0) * factor)
                    - self.scheduler.used.get(res, 0)
                    - reserved_total.get(res, 0)
                )
                if need > idle:
                    message = (
                        f"cluster resources insufficient to enqueue: {res} requested "
                        f"{format_milli(need, res)}, idle {format_milli(max(idle, 0), res)} "
                        f"(overcommit factor {factor})"
                    )
                    break
        if message is not None:
            self._gang_blocked(gang, f"pod group is not inqueue: {message}", reason)
            return False
        if queue is not None:
            _add(queue.reserved, gang.min_resources)
        gang.reserved = True
        gang.message = gang.reason = None
        self.dirty_jobs[gang.job.key] = None
        return True

    def _within_capability(
        self, gang: Gang, pending: list[PodRuntime], need: int
    ) -> tuple[list[PodRuntime], str | None]:
        """The prefix of pending pods the queue's capability still admits."""
        queue = self.queues.get(gang.queue)
        if queue is None or queue.capability is None:
            return pending, None
        reserved_here = gang.min_resources if gang.reserved else {}
        budget = {
            res: cap
            - queue.allocated.get(res, 0)
            - queue.reserved.get(res, 0)
            + reserved_here.get(res, 0)
            for res, cap in queue.capability.items()
        }
        admitted = []
        for pod in pending:
            if any(pod.req.get(res, 0) > left for res, left in budget.items()):
                break
            for res in budget:
                budget[res] -= pod.req.get(res, 0)
            admitted.append(pod)
        if len(admitted) < max(need, 1):
            cap = {r: format_milli(v, r) for r, v in sorted(queue.capability.items())}
            return [], (
                f"queue {gang.queue} resource quota insufficient: capability {cap} would be "
                f"exceeded by {len(pending) - len(admitted)} more pod(s)"
            )
        return admitted, None

    def _gang_blocked(self, gang: Gang, message: str, reason: str) -> None:
        gang.blocked_epoch = self.capacity_epoch
        if gang.message != message:
            gang.message, gang.reason = message, reason
            job_obj = self._job_obj(gang.job)
            self.record_event(
                job_obj,
                "Warning",
                "PodGroupPending",
                f"PodGroup {gang.job.key[0]}:{gang.pg_name} unschedule,reason: {message}",
            )
            pg = self.store.get(self.types.podgroups, gang.job.key[0], gang.pg_name)
            if pg is not None:
                self.record_event(pg, "Warning", "Unschedulable", message)
            self.dirty_jobs[gang.job.key] = None

    def _unschedulable(
        self,
        gang: Gang,
        pending: list[PodRuntime],
        fit_error: str,
        need: int,
        reason: str = "NotEnoughResources",
    ) -> None:
        total = len(gang.job.pods)
        message = (
            f"{len(pending)}/{total} tasks in gang unschedulable: pod group is not ready, "
            f"{gang.min_member} minAvailable, {len(pending)} Pending; {fit_error}"
        )
        if need == 0:
            message = f"{len(pending)}/{total} tasks unschedulable: {fit_error}"
        self._gang_blocked(gang, message, reason)
        for pod in pending:
            if pod.last_fit_error != fit_error:
                pod.last_fit_error = fit_error
                self._write_pod_unschedulable(pod, fit_error)

    def _write_pod_unschedulable(self, pod: PodRuntime, message: str) -> None:
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None:
            return
        status = {
            **obj["status"],
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": self.now_text(),
                    "lastProbeTime": None,
                }
            ],
        }
        self._replace_pod(obj, status=status)
        self.record_event(obj, "Warning", "FailedScheduling", message, component="volcano")

    # ==================================================================================
    # kubelet
    # ==================================================================================
    def _replace_pod(self, obj: dict[str, Any], **parts: Any) -> dict[str, Any]:
        new = {**obj, "metadata": dict(obj["metadata"]), **parts}
        return self.store.replace(self.types.pods, new)

    def _node_ip(self, node_name: str) -> str:
        cached = self._node_ips.get(node_name)
        if cached is not None:
            return cached
        node = self.store.get(self.types.nodes, "", node_name)
        ip = "10.0.0.1"
        for address in (node or {}).get("status", {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                ip = str(address["address"])
        self._node_ips[node_name] = ip
        return ip

    def _bind(self, pod: PodRuntime, node_name: str) -> None:
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None:
            return
        pod.node = node_name
        pod.state = "bound"
        pod.last_fit_error = None
        queue = self.queues.get(pod.queue)
        if queue is not None:
            _add(queue.allocated, pod.req)
            self.dirty_queues.add(pod.queue)
        now = self.now_text()
        host_ip = self._node_ip(node_name)
        status = {
            "phase": "Pending",
            "qosClass": obj["status"].get("qosClass", "BestEffort"),
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": now,
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": now,
                    "lastProbeTime": None,
                },
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastTransitionTime": now,
                    "lastProbeTime": None,
                },
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: "
                    f"[{' '.join(c['name'] for c in obj['spec']['containers'])}]",
                    "lastTransitionTime": now,
                    "lastProbeTime": None,
                },
            ],
            "containerStatuses": [
                self._container_status(c, waiting=("ContainerCreating", None))
                for c in obj["spec"]["containers"]
            ],
        }
        self._replace_pod(obj, spec={**obj["spec"], "nodeName": node_name}, status=status)
        self.stats.pods_bound += 1
        self.record_event(
            obj,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.key[0]}/{pod.key[1]} to {node_name}",
            component="volcano",
        )
        pod.gen += 1
        self.after(self.settings.pod_startup_seconds, self._start_container, pod, pod.gen)
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _container_status(
        self,
        container: dict[str, Any],
        *,
        waiting: tuple[str, str | None] | None = None,
        running: str | None = None,
        terminated: dict[str, Any] | None = None,
        last: dict[str, Any] | None = None,
        restarts: int = 0,
        container_id: str | None = None,
    ) -> dict[str, Any]:
        image = str(container.get("image", ""))
        state: dict[str, Any]
        if waiting is not None:
            state = {
                "waiting": {"reason": waiting[0], **({"message": waiting[1]} if waiting[1] else {})}
            }
        elif running is not None:
            state = {"running": {"startedAt": running}}
        else:
            state = {"terminated": terminated or {}}
        status: dict[str, Any] = {
            "name": container["name"],
            "image": image,
            "imageID": "" if waiting else f"docker.io/{image}@sha256:{'0' * 64}",
            "ready": running is not None,
            "started": running is not None,
            "restartCount": restarts,
            "state": state,
            "lastState": {"terminated": last} if last else {},
        }
        if container_id:
            status["containerID"] = container_id
        return status

    def _start_container(self, pod: PodRuntime, gen: int) -> None:
        if pod.gen != gen or pod.deleting or self.pods.get(pod.key) is not pod:
            return
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None:
            return
        containers = obj["spec"]["containers"]
        if image_pull_fails(obj):
            pod.state = "waiting"
            image = containers[0].get("image", "")
            status = {
                **obj["status"],
                "containerStatuses": [
                    self._container_status(
                        c,
                        waiting=("ImagePullBackOff", f'Back-off pulling image "{c.get("image")}"'),
                    )
                    for c in containers
                ],
            }
            self._replace_pod(obj, status=status)
            self.record_event(
                obj,
                "Warning",
                "Failed",
                f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                f'pull and unpack image "{image}": not found',
                component="kubelet",
            )
            self.record_event(
                obj, "Normal", "BackOff", f'Back-off pulling image "{image}"', component="kubelet"
            )
            if pod.job is not None:
                self.dirty_jobs[pod.job.key] = None
            return
        now = self.now()
        pod.state = "running"
        pod.started_at = now
        pod.exit_code = pod.reason = None
        if "podIP" not in obj["status"]:
            n = next(self._ip)
            pod_ip = f"10.244.{(n // 250) % 250}.{n % 250 + 2}"
        else:
            pod_ip = obj["status"]["podIP"]
        stamp = rfc3339(now)
        old_statuses = {c["name"]: c for c in obj["status"].get("containerStatuses") or []}
        status = {
            **obj["status"],
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp, "lastProbeTime": None}
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                self._container_status(
                    c,
                    running=stamp,
                    restarts=pod.restarts,
                    last=(old_statuses.get(c["name"], {}).get("lastState") or {}).get("terminated"),
                    container_id=f"containerd://{pod.uid.replace('-', '')}{pod.restarts}",
                )
                for c in containers
            ],
        }
        self._replace_pod(obj, status=status)
        run_for = self._run_time(obj, pod)
        pod.gen += 1
        if run_for is not None:
            self.after(run_for, self._finish_container, pod, pod.gen)
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _outcome(self, obj: dict[str, Any], pod: PodRuntime) -> tuple[int, str] | None:
        """(exit code, reason) when this attempt is configured to fail, else None."""
        annotations = obj["metadata"].get("annotations") or {}
        fail = annotations.get(FAIL)
        code_text = annotations.get(EXIT_CODE)
        code = int(code_text) if code_text and code_text.lstrip("-").isdigit() else None
        if not fail and not code:
            return None
        attempts = annotation_float(annotations, FAIL_ATTEMPTS)
        if attempts is not None:
            done = int(annotations.get("volcano.sh/job-retry-count", "0") or 0) + pod.restarts
            if done >= attempts:
                return None
        if fail == "OOMKilled":
            return (code if code else 137), "OOMKilled"
        return (code if code else 1), (fail if fail and fail != "true" else "Error")

    def _run_time(self, obj: dict[str, Any], pod: PodRuntime) -> float | None:
        annotations = obj["metadata"].get("annotations") or {}
        failing = self._outcome(obj, pod) is not None
        if failing:
            fail_after = annotation_float(annotations, FAIL_AFTER)
            if fail_after is not None:
                return fail_after
        duration = annotation_float(annotations, DURATION)
        if duration is None:
            slept = sleep_seconds(obj["spec"])
            if slept == "forever":
                return None if not failing else self.settings.default_duration_seconds
            duration = slept if isinstance(slept, float) else self.settings.default_duration_seconds
        if duration is None and failing:
            duration = 1.0
        return duration

    def _finish_container(self, pod: PodRuntime, gen: int) -> None:
        if pod.gen != gen or pod.deleting or self.pods.get(pod.key) is not pod:
            return
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None:
            return
        now = self.now()
        outcome = self._outcome(obj, pod)
        code, reason = outcome if outcome else (0, "Completed")
        pod.history.append((pod.started_at or now, now, code, reason))
        terminated = {
            "exitCode": code,
            "reason": reason,
            "startedAt": rfc3339(pod.started_at or now),
            "finishedAt": rfc3339(now),
            "containerID": f"containerd://{pod.uid.replace('-', '')}{pod.restarts}",
        }
        containers = obj["spec"]["containers"]
        restart = pod.restart_policy == "Always" or (
            pod.restart_policy == "OnFailure" and code != 0
        )
        if restart:
            pod.restarts += 1
            pod.started_at = None  # backing off: no container is running
            pod.state = "running"  # phase stays Running while the kubelet backs off
            backoff = min(10.0 * 2 ** (pod.restarts - 1), 300.0)
            status = {
                **obj["status"],
                "containerStatuses": [
                    self._container_status(
                        c,
                        waiting=(
                            "CrashLoopBackOff",
                            f"back-off {int(backoff)}s restarting failed container="
                            f"{c['name']} pod={pod.key[1]}_{pod.key[0]}({pod.uid})",
                        ),
                        last=terminated,
                        restarts=pod.restarts,
                    )
                    for c in containers
                ],
            }
            status["conditions"] = [
                {**c, "status": "False", "reason": "ContainersNotReady"}
                if c["type"] in ("Ready", "ContainersReady")
                else c
                for c in obj["status"].get("conditions") or []
            ]
            self._replace_pod(obj, status=status)
            self.record_event(
                obj,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {containers[0]['name']} in pod {pod.key[1]}",
                component="kubelet",
            )
            pod.gen += 1
            self.after(backoff, self._start_container, pod, pod.gen)
            return
        pod.state = "succeeded" if code == 0 else "failed"
        pod.finished_at = now
        pod.exit_code, pod.reason = code, reason
        phase = "Succeeded" if code == 0 else "Failed"
        stamp = rfc3339(now)
        status = {
            **obj["status"],
            "phase": phase,
            "conditions": [
                {
                    **c,
                    "status": "False",
                    "reason": "PodCompleted" if code == 0 else "PodFailed",
                    "lastTransitionTime": stamp,
                }
                if c["type"] in ("Ready", "ContainersReady")
                else c
                for c in obj["status"].get("conditions") or []
            ],
            "containerStatuses": [
                self._container_status(c, terminated=terminated, restarts=pod.restarts)
                for c in containers
            ],
        }
        self._replace_pod(obj, status=status)
        self._release(pod)
        self.stats.pods_finished += 1
        job = pod.job
        if job is not None:
            if code != 0:
                job.inbox.append(("PodFailed", pod))
            elif all(
                p.state == "succeeded" for p in job.pods.values() if p.task == pod.task
            ) and sum(1 for p in job.pods.values() if p.task == pod.task) >= next(
                (t.replicas for t in job.tasks if t.name == pod.task), 0
            ):
                job.inbox.append(("TaskCompleted", pod))
            self.dirty_jobs[job.key] = None

    def _release(self, pod: PodRuntime) -> None:
        node = self.scheduler.nodes.get(pod.node) if pod.node is not None else None
        if node is not None and pod.key in node.pods:
            self.scheduler.release(node.name, pod.key, pod.req)
            queue = self.queues.get(pod.queue)
            if queue is not None:
                _add(queue.allocated, pod.req, -1)
                self.dirty_queues.add(pod.queue)
            self._capacity_changed()

    def delete_pod(
        self,
        pod: PodRuntime,
        *,
        grace: float | None = None,
        by_controller: bool = False,
        evicted: bool = False,
    ) -> dict[str, Any] | None:
        """Graceful deletion: Terminating now, gone after the (simulated) grace period."""
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None:
            return None
        pod.killed_by_controller = pod.killed_by_controller or by_controller
        if grace is None:
            grace = float(obj["spec"].get("terminationGracePeriodSeconds", 30))
        if pod.node is None or pod.terminal or grace <= 0:
            return self._remove_pod(pod, evicted=evicted)
        if pod.deleting:
            return obj
        pod.deleting = True
        pod.gen += 1
        delay = min(grace, self.settings.pod_termination_seconds)
        new = self._replace_pod(
            obj,
            metadata={
                **obj["metadata"],
                "deletionTimestamp": rfc3339(self.now() + grace),
                "deletionGracePeriodSeconds": int(grace),
            },
        )
        self.record_event(
            obj,
            "Normal",
            "Killing",
            f"Stopping container {obj['spec']['containers'][0]['name']}",
            component="kubelet",
        )
        self.after(delay, self._terminated, pod, pod.gen, evicted)
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None
        return new

    def _terminated(self, pod: PodRuntime, gen: int, evicted: bool) -> None:
        if pod.gen == gen and self.pods.get(pod.key) is pod:
            self._remove_pod(pod, evicted=evicted)

    def _remove_pod(self, pod: PodRuntime, *, evicted: bool = False) -> dict[str, Any] | None:
        self._release(pod)
        pod.gen += 1
        self.pods.pop(pod.key, None)
        final = self.store.delete(self.types.pods, *pod.key)
        job = pod.job
        if job is not None and job.pods.get(pod.key[1]) is pod:
            del job.pods[pod.key[1]]
            if not pod.killed_by_controller and not pod.terminal:
                job.inbox.append(("PodEvicted", pod))
            self.dirty_jobs[job.key] = None
        if evicted:
            self.record_event(
                final,
                "Normal",
                "TaintManagerEviction",
                f"Marking for deletion Pod {pod.key[0]}/{pod.key[1]}",
                component="taint-eviction-controller",
            )
        if pod.key[0] in self.terminating_ns:
            self.ns_dirty = True
        return final

    # ==================================================================================
    # public operations (called by the API layer or the Python API)
    # ==================================================================================
    def pod(self, namespace: str, name: str) -> PodRuntime | None:
        """The runtime record of a pod."""
        return self.pods.get((namespace, name))

    def delete_job(self, namespace: str, name: str, propagation: str) -> dict[str, Any] | None:
        """Delete a Volcano Job with Background (default), Foreground or Orphan propagation."""
        with self.lock:
            obj = self.store.get(self.types.jobs, namespace, name)
            if obj is None:
                return None
            if propagation == "Orphan":
                job = self.jobs.get((namespace, name))
                for pod in list(job.pods.values()) if job else []:
                    pod_obj = self.store.get(self.types.pods, *pod.key)
                    if pod_obj is not None:
                        self._replace_pod(
                            pod_obj, metadata={**pod_obj["metadata"], "ownerReferences": []}
                        )
            if propagation == "Foreground":
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                finalizers = list(obj["metadata"].get("finalizers") or [])
                if "foregroundDeletion" not in finalizers:
                    finalizers.append("foregroundDeletion")
                return self.store.replace(
                    self.types.jobs,
                    {
                        **obj,
                        "metadata": {
                            **obj["metadata"],
                            "deletionTimestamp": self.now_text(),
                            "finalizers": finalizers,
                        },
                    },
                )
            if obj["metadata"].get("finalizers"):
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                return self.store.replace(
                    self.types.jobs,
                    {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": self.now_text()}},
                )
            return self.store.delete(self.types.jobs, namespace, name)

    def delete_namespace(self, name: str) -> dict[str, Any] | None:
        """Mark a namespace Terminating; its content is deleted, then the namespace."""
        with self.lock:
            obj = self.store.get(self.types.namespaces, "", name)
            if obj is None:
                return None
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            new = self.store.replace(
                self.types.namespaces,
                {
                    **obj,
                    "metadata": {**obj["metadata"], "deletionTimestamp": self.now_text()},
                    "status": {"phase": "Terminating"},
                },
            )
            self.terminating_ns.add(name)
            self.ns_dirty = True
            self.wake.set()
            return new

    def _namespace_gc(self) -> None:
        for name in list(self.terminating_ns):
            for ns, job_name in [k for k in self.jobs if k[0] == name]:
                self.delete_job(ns, job_name, "Background")
            for obj in self.store.select(self.types.jobs, name):
                self.store.delete(self.types.jobs, name, obj["metadata"]["name"])
            for key, pod in list(self.pods.items()):
                if key[0] == name and not pod.deleting:
                    self.delete_pod(pod, by_controller=True)
            for obj in self.store.select(self.types.podgroups, name):
                self.store.delete(self.types.podgroups, name, obj["metadata"]["name"])
            if any(k[0] == name for k in self.pods):
                continue
            for obj in self.store.select(self.types.pods, name):
                self.store.delete(self.types.pods, name, obj["metadata"]["name"])
            for obj in self.store.select(self.types.events, name):
                self.store.delete(self.types.events, name, obj["metadata"]["name"])
            self.terminating_ns.discard(name)
            self.store.delete(self.types.namespaces, "", name)

    def node_not_ready(self, name: str, *, mode: str = "evict") -> None:
        """The node stops reporting: Ready=Unknown, unreachable taints, pods evicted or failed.

        ``mode="evict"`` deletes the node's pods after ``evictionSeconds`` (Volcano sees
        PodEvicted); ``mode="fail"`` marks them Failed with reason NodeLost (PodFailed).
        """
        if mode not in ("evict", "fail"):
            raise ValueError("mode must be 'evict' or 'fail'")
        with self.lock:
            obj = self._node(name)
            now = self.now_text()
            taints = [
                t
                for t in obj["spec"].get("taints") or []
                if t.get("key") not in (UNREACHABLE_TAINT, NOT_READY_TAINT)
            ]
            taints += [
                {"key": UNREACHABLE_TAINT, "effect": e, "timeAdded": now}
                for e in ("NoSchedule", "NoExecute")
            ]
            self.store.replace(
                self.types.nodes,
                {
                    **obj,
                    "metadata": dict(obj["metadata"]),
                    "spec": {**obj["spec"], "taints": taints},
                    "status": {**obj["status"], "conditions": self._node_conditions(False, now)},
                },
            )
            self.after(self.settings.eviction_seconds, self._evict_node, name, mode)
            self.settle()

    def _evict_node(self, name: str, mode: str) -> None:
        if _ready(self.store.get(self.types.nodes, "", name) or {}):
            return
        for key in sorted(self.scheduler.nodes[name].pods) if name in self.scheduler.nodes else []:
            pod = self.pods.get(key)
            if pod is None or pod.deleting:
                continue
            if mode == "fail":
                self._fail_pod(pod, "NodeLost", "Node unreachable: the pod was lost")
            else:
                self.delete_pod(pod, grace=self.settings.pod_termination_seconds, evicted=True)

    def _fail_pod(self, pod: PodRuntime, reason: str, message: str) -> None:
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None or pod.terminal:
            return
        now = self.now()
        pod.state, pod.exit_code, pod.reason, pod.finished_at = "failed", 137, reason, now
        pod.gen += 1
        status = {
            **obj["status"],
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "containerStatuses": [
                self._container_status(
                    c,
                    terminated={
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": rfc3339(pod.started_at or now),
                        "finishedAt": rfc3339(now),
                    },
                    restarts=pod.restarts,
                )
                for c in obj["spec"]["containers"]
            ],
        }
        self._replace_pod(obj, status=status)
        self._release(pod)
        if pod.job is not None:
            pod.job.inbox.append(("PodFailed", pod))
            self.dirty_jobs[pod.job.key] = None

    def node_ready(self, name: str) -> None:
        """The node reports Ready again; unreachable taints are removed."""
        with self.lock:
            obj = self._node(name)
            taints = [
                t
                for t in obj["spec"].get("taints") or []
                if t.get("key") not in (UNREACHABLE_TAINT, NOT_READY_TAINT)
            ]
            spec = {**obj["spec"], "taints": taints}
            if not taints:
                spec.pop("taints")
            self.store.replace(
                self.types.nodes,
                {
                    **obj,
                    "metadata": dict(obj["metadata"]),
                    "spec": spec,
                    "status": {
                        **obj["status"],
                        "conditions": self._node_conditions(True, self.now_text()),
                    },
                },
            )
            self.settle()

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        """``kubectl cordon``/``uncordon``: spec.unschedulable plus the matching taint."""
        with self.lock:
            obj = self._node(name)
            taints = [
                t for t in obj["spec"].get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT
            ]
            spec = {k: v for k, v in obj["spec"].items() if k not in ("unschedulable", "taints")}
            if unschedulable:
                spec["unschedulable"] = True
                taints.append(
                    {
                        "key": UNSCHEDULABLE_TAINT,
                        "effect": "NoSchedule",
                        "timeAdded": self.now_text(),
                    }
                )
            if taints:
                spec["taints"] = taints
            self.store.replace(
                self.types.nodes, {**obj, "metadata": dict(obj["metadata"]), "spec": spec}
            )
            self.settle()

    def _node(self, name: str) -> dict[str, Any]:
        obj = self.store.get(self.types.nodes, "", name)
        if obj is None:
            raise KeyError(f"no node named {name!r}")
        return obj

    def set_queue_state(self, name: str, state: str) -> None:
        """Open or close a queue (what a Volcano ``OpenQueue``/``CloseQueue`` Command does)."""
        if state not in ("Open", "Closed"):
            raise ValueError("state must be Open or Closed")
        with self.lock:
            obj = self.store.get(self.types.queues, "", name)
            if obj is None:
                raise KeyError(f"no queue named {name!r}")
            self.store.replace(
                self.types.queues,
                {
                    **obj,
                    "metadata": dict(obj["metadata"]),
                    "status": {**(obj.get("status") or {}), "state": state},
                },
            )
            self.dirty_queues.add(name)
            self.settle()

    def _publish_queues(self) -> None:
        """Write Queue status: state, PodGroup counts per phase, allocated resources."""
        names, self.dirty_queues = self.dirty_queues, set()
        counts: dict[str, dict[str, int]] = {n: {} for n in names}
        for job in self.jobs.values():
            gang = job.gang
            if gang is not None and gang.queue in counts:
                bucket = counts[gang.queue]
                bucket[gang.phase] = bucket.get(gang.phase, 0) + 1
        for name in names:
            obj = self.store.get(self.types.queues, "", name)
            state = self.queues.get(name)
            if obj is None or state is None:
                continue
            bucket = counts[name]
            status = {
                "state": (obj.get("status") or {}).get("state") or "Open",
                "pending": bucket.get("Pending", 0),
                "inqueue": bucket.get("Inqueue", 0),
                "running": bucket.get("Running", 0),
                "completed": bucket.get("Completed", 0),
                "unknown": bucket.get("Unknown", 0),
                "allocated": resource_list_format(state.allocated),
            }
            status["allocated"].pop("pods", None)
            if obj.get("status") != status:
                self.store.replace(
                    self.types.queues, {**obj, "metadata": dict(obj["metadata"]), "status": status}
                )

    # ==================================================================================
    # events
    # ==================================================================================
    def record_event(
        self,
        involved: dict[str, Any] | None,
        type_: str,
        reason: str,
        message: str,
        *,
        component: str = "vc-controller-manager",
    ) -> None:
        """Create or bump a core Event about ``involved`` (deduplicated like the recorder)."""
        if involved is None:
            return
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        dedupe = (meta.get("uid", ""), reason, message)
        now = self.now()
        existing = self._events.get(dedupe)
        if existing is not None:
            obj = self.store.get(self.types.events, *existing)
            if obj is not None:
                self.store.replace(
                    self.types.events,
                    {
                        **obj,
                        "metadata": dict(obj["metadata"]),
                        "count": obj.get("count", 1) + 1,
                        "lastTimestamp": rfc3339(now),
                    },
                )
                return
        name = f"{meta['name']}.{int(now * 1e9) + next(self._seq):x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": object_reference(involved),
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "eventTime": None,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        if not meta.get("namespace"):
            event["involvedObject"].pop("namespace", None)
        self.store.create(self.types.events, event)
        self._events[dedupe] = (namespace, name)
        self._event_order.append(dedupe)
        self.stats.events_recorded += 1
        live = len(self._event_order) - self._event_head
        if live > self.settings.max_events:
            oldest = self._event_order[self._event_head]
            self._event_head += 1
            location = self._events.pop(oldest, None)
            if location is not None:
                self.store.delete(self.types.events, *location)
            if self._event_head > 4096:
                del self._event_order[: self._event_head]
                self._event_head = 0

    # ==================================================================================
    # logs
    # ==================================================================================
    def pod_log(
        self,
        pod: PodRuntime,
        obj: dict[str, Any],
        container: str,
        *,
        previous: bool = False,
        timestamps: bool = False,
    ) -> list[str]:
        """A few plausible log lines for the container, derived from its simulated run."""
        annotations = obj["metadata"].get("annotations") or {}
        limit = int(annotation_float(annotations, LOG_LINES) or 40)
        runs: list[tuple[float, float | None, int | None, str | None]]
        if previous:
            runs = pod.history[-1:] if pod.restarts else []
        elif pod.state == "running" and pod.started_at is not None:
            runs = [(pod.started_at, None, None, None)]
        else:
            runs = pod.history[-1:]
        if not runs:
            return []
        start, end, code, reason = runs[0]
        end_time = end if end is not None else self.now()
        node = self.store.get(self.types.nodes, "", pod.node or "")
        labels = (node or {}).get("metadata", {}).get("labels") or {}
        product = labels.get("nvidia.com/gpu.product", "no GPU")
        gpus = sum(v for k, v in pod.req.items() if k.startswith(("nvidia.com/", "amd.com/")))
        interval = max(self.settings.log_line_interval_seconds, 0.001)
        lines = [
            (
                start,
                f"kubesim: container {container} started on {pod.node} "
                f"({gpus // 1000} x {product})",
            ),
            (start, f"task {pod.task} index {pod.index}, job {pod.job.key[1] if pod.job else '-'}"),
        ]
        steps = int((end_time - start) // interval)
        rng = random.Random(f"{pod.uid}-{len(pod.history)}")  # noqa: S311 - fake loss curve
        loss = 2.5 + rng.random()
        for step in range(1, steps + 1):
            loss *= 0.97 + rng.random() * 0.02
            lines.append(
                (
                    start + step * interval,
                    f"step {step}: loss={loss:.4f} throughput={900 + rng.randint(0, 200)} "
                    "samples/s",
                )
            )
        if end is not None:
            if code == 0:
                lines.append((end, "training finished, saving checkpoint; exit 0"))
            elif reason == "OOMKilled":
                lines.append((end, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"))
            else:
                lines.append((end, f"error: process exited with code {code}"))
        if len(lines) > limit:
            lines = lines[:2] + lines[-(limit - 2) :]
        if timestamps:
            return [f"{rfc3339_micro(t)} {text}" for t, text in lines]
        return [text for _, text in lines]

    # ==================================================================================
    # introspection
    # ==================================================================================
    def gpu_inventory(self) -> dict[str, dict[str, int]]:
        """Per ``gpu-type`` label: total and used ``nvidia.com/gpu`` (whole units)."""
        out: dict[str, dict[str, int]] = {}
        for node in self.scheduler.nodes.values():
            model = node.labels.get("gpu-type")
            if not model:
                continue
            bucket = out.setdefault(model, {"total": 0, "used": 0})
            bucket["total"] += node.allocatable.get("nvidia.com/gpu", 0) // 1000
            bucket["used"] += node.used.get("nvidia.com/gpu", 0) // 1000
        return out

    def catalog(self) -> dict[str, Any]:
        """The built-in GPU model catalog (for docs and the control endpoint)."""
        return {k: v.__dict__ for k, v in GPU_CATALOG.items()}


def _ready(node: dict[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def _pod_phase(pod: PodRuntime) -> str:
    return {
        "pending": "Pending",
        "bound": "Pending",
        "waiting": "Pending",
        "running": "Running",
        "succeeded": "Succeeded",
        "failed": "Failed",
    }[pod.state]
