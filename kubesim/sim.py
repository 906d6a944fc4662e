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
import threading
import time
from collections.abc import Callable
from typing import Any

from kubesim.clock import SimClock, rfc3339, wall_text
from kubesim.commands import CommandController
from kubesim.config import GPU_CATALOG, ClusterConfig, SimSettings, build_nodes
from kubesim.controller import JobController
from kubesim.kubelet import Kubelet
from kubesim.objects import (
    clone,
    object_reference,
)
from kubesim.operator import (
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    crashing,
    is_gpu_node,
    operator_pod,
    pod_name,
)
from kubesim.operator import NAMESPACE as OPERATOR_NS
from kubesim.quantity import resource_list_to_milli
from kubesim.resources import Types
from kubesim.runtime import (
    API_BUSY_SECONDS,
    BUILTIN_NAMESPACES,
    INSTALLED_NAMESPACES,
    QUEUE_PUBLISH_SECONDS,
    QUEUE_QUIET_SECONDS,
    STEP_SECONDS,
    STEP_SECONDS_UNDER_LOAD,
    Gang,
    JobRuntime,
    PodRuntime,
    QueueState,
    Stats,
    is_ready,
)
from kubesim.scheduler import (
    NOT_READY_TAINT,
    OUT_OF_SERVICE_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    Scheduler,
)
from kubesim.store import Store, WatchEvent
from kubesim.volcano import VolcanoScheduler
from kubesim.volcano_conf import (
    CONF_KEY,
    CONFIGMAP,
    DEFAULT,
    NAMESPACE,
    ConfError,
    configmap,
    parse_conf,
)

log = logging.getLogger("kubesim")


class Simulation(JobController, VolcanoScheduler, Kubelet, CommandController):
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
        self.pending_commands: dict[tuple[str, str], None] = {}  # Commands not yet consumed
        self.closing_queues: set[str] = set()  # Closing queues that lost a PodGroup
        self.terminating_ns: set[str] = set()
        self.ns_dirty = False
        self._step_now: float | None = None
        self._next_queue_publish = 0.0
        self._settling = False
        self.sched_dirty = True
        self.capacity_epoch = 0
        self._timers: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._events: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._event_order: list[tuple[str, str, str]] = []
        self._event_head = 0
        self._ip = itertools.count(2)
        self._cluster_ip = itertools.count(10)
        self._operator_ip = itertools.count(0)
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        for rt in types.all:
            if rt.key not in store.collections:
                store.register(rt)
        store.listeners.append(self.on_event)
        # Maintained by the API (unlocked, approximate): requests being answered right now
        # and when the last one arrived. The loop uses them to let requests go first.
        self.api_inflight = 0
        self.last_api_request = 0.0
        self._node_ips: dict[str, str] = {}
        self.gpu_slots: dict[tuple[str, str], set[int]] = {}  # (node, resource) -> taken
        self.volcano_conf = DEFAULT  # replaced when volcano-scheduler-configmap changes
        self.volcano_conf_error: str | None = None

    # ==================================================================================
    # bootstrap
    # ==================================================================================
    def bootstrap(self) -> None:
        """Create built-in namespaces, configured nodes, queues and namespaces."""
        with self.lock:
            for name in (*BUILTIN_NAMESPACES, *self.config.namespaces, *INSTALLED_NAMESPACES):
                if self.store.get(self.types.namespaces, "", name) is None:
                    self.store.create(self.types.namespaces, self.new_namespace(name))
            conf = configmap()
            if self.store.get(self.types.configmaps, NAMESPACE, CONFIGMAP) is None:
                self.store.create(self.types.configmaps, conf)
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
            or (self.dirty_queues and self._queue_publish_due())
            or (self.sched_dirty and self.gangs)
            or (self._timers and self._timers[0][0] <= self.now())
            or self.ns_dirty
            or self.pending_commands
            or self.closing_queues
        )

    def step(self, slice_seconds: float = STEP_SECONDS) -> bool:
        """Do one bounded batch of work; returns True when more is pending right now."""
        started = time.thread_time()
        with self.lock:
            self.stats.steps += 1
            now = self._step_now = self.clock.now()
            try:
                self._step_once(now, slice_seconds)
            finally:
                self._step_now = None
            more = self.has_work()
        self.stats.step_seconds += time.thread_time() - started
        return more

    def _step_once(self, now: float, slice_seconds: float) -> None:
        """Timers due by ``now``, dirty jobs, one scheduling cycle, namespaces, queues.

        Each phase stops when the step's time slice is used up and leaves the rest for the
        next step, so an API request never waits behind more than a few milliseconds of
        simulation (20,000 pods are created and bound in many small steps, not one).
        """
        deadline = time.perf_counter() + slice_seconds
        fired = 0
        while self._timers and self._timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(self._timers)
            fn(*args)
            fired += 1
            if fired % 64 == 0 and time.perf_counter() > deadline:
                break
        self.stats.timers_fired += fired
        if self.pending_commands:
            self._run_commands()
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
        if self.closing_queues:
            self._sync_closing_queues()
        if self.dirty_queues and self._queue_publish_due():
            self._next_queue_publish = time.monotonic() + QUEUE_PUBLISH_SECONDS
            self._publish_queues()

    def _queue_publish_due(self) -> bool:
        """Queue status is a summary counted over every job: publish it at once when all is
        quiet (or ``settle`` asks), else at most every ``QUEUE_PUBLISH_SECONDS``, as Volcano's
        queue controller updates it behind its work queue. Under a stream of creates the
        simulation is quiet between two bursts, and publishing in each of those gaps made the
        counting grow with the square of the jobs created."""
        if time.monotonic() >= self._next_queue_publish:
            return True
        if self.dirty_jobs or (self.sched_dirty and self.gangs):
            return False
        return self._settling or time.monotonic() - self.last_api_request >= QUEUE_QUIET_SECONDS

    def settle(self, max_steps: int = 100_000) -> None:
        """Run zero-time work until nothing is left (timers in the future stay pending)."""
        with self.lock:
            self._settling = True
            try:
                for _ in range(max_steps):
                    if not self.step():
                        return
            finally:
                self._settling = False
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

    def pause(self) -> None:
        """Stop the background loop from doing work (API requests are still answered).

        Explicit :meth:`settle` and :meth:`advance` calls still run; only the loop waits.
        """
        self._paused.set()

    def resume(self) -> None:
        """Let the background loop work again."""
        self._paused.clear()
        self.wake.set()

    @property
    def paused(self) -> bool:
        """Whether the background loop is paused."""
        return self._paused.is_set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._paused.is_set():
                self.wake.wait(0.05)
                self.wake.clear()
                continue
            # API requests go first: while any is in flight the simulation waits (at most
            # 50 ms), like a controller whose informer lags a busy apiserver. Bursts of
            # creates are then answered at API speed and the simulation catches up after.
            waited = 0
            while self.api_inflight > 0 and waited < 50:
                time.sleep(0.001)
                waited += 1
            # While requests keep arriving, work in 1 ms slices so that the next one waits
            # at most about that long for the lock; otherwise use the normal slice.
            recent = time.monotonic() - self.last_api_request < API_BUSY_SECONDS
            try:
                more = self.step(STEP_SECONDS_UNDER_LOAD if recent else STEP_SECONDS)
            except Exception:  # a bug must not kill the cluster; it is logged loudly
                log.exception("kubesim: simulation step failed")
                more = False
            if more:
                time.sleep(0)  # let API threads take the lock between batches
                continue
            with self.lock:
                wait = self.clock.wall_seconds_until(self._timers[0][0]) if self._timers else None
                if self.dirty_queues:  # a deferred queue status is due soon
                    idle_at = self.last_api_request + QUEUE_QUIET_SECONDS
                    due = min(self._next_queue_publish, idle_at) - time.monotonic()
                    until = max(due, API_BUSY_SECONDS)
                    wait = until if wait is None else min(wait, until)
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
            name = event.entry.obj["metadata"]["name"]
            if event.type == "DELETED":
                self.scheduler.remove_node(name)
                for app in (DEVICE_PLUGIN, DCGM_EXPORTER):
                    if self.store.get(self.types.pods, OPERATOR_NS, pod_name(app, name)):
                        self.store.delete(self.types.pods, OPERATOR_NS, pod_name(app, name))
                self.unconfirmed_release(name, force=True)  # the pod GC's part
            else:
                if event.type == "ADDED" and is_gpu_node(event.entry.obj):
                    self.after(0, self._start_operator_pods, name)
                reach = self._node_reach(name)
                if reach != "unreachable":
                    self.unconfirmed_release(name, force=reach == "out-of-service")
                old = event.old.obj if event.old else None
                new = event.entry.obj
                if (
                    old is None
                    or old.get("spec") != new.get("spec")
                    or old["metadata"].get("labels") != new["metadata"].get("labels")
                    or old.get("status", {}).get("allocatable")
                    != new.get("status", {}).get("allocatable")
                    or is_ready(old) != is_ready(new)
                ):
                    self.scheduler.upsert_node(new)
                    self._capacity_changed()
        elif rt is self.types.queues:
            self._on_queue_event(event)
        elif rt is self.types.commands:
            if event.type == "ADDED":
                self._on_command_added(event.entry.obj)
        elif rt is self.types.podgroups and event.type == "DELETED":
            self._on_podgroup_deleted(event.entry.obj)
        elif rt is self.types.configmaps and event.type != "DELETED":
            meta = event.entry.obj["metadata"]
            if meta.get("namespace") == NAMESPACE and meta["name"] == CONFIGMAP:
                self._load_volcano_conf(event.entry.obj)
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

    def _load_volcano_conf(self, obj: dict[str, Any]) -> None:
        """Re-read the scheduler configuration, as Volcano does when its mounted file changes.

        A configuration that cannot be parsed (or a missing key) is refused and the previous
        one stays in force, as the real scheduler logs and keeps it; deleting the ConfigMap
        changes nothing either (the running scheduler keeps the file it mounted).
        """
        text = (obj.get("data") or {}).get(CONF_KEY)
        try:
            if text is None:
                raise ConfError(f"ConfigMap {CONFIGMAP} has no key {CONF_KEY}")
            conf = parse_conf(text)
        except ConfError as exc:
            self.volcano_conf_error = str(exc)
            log.warning("kubesim: scheduler configuration refused, keeping the previous: %s", exc)
            return
        self.volcano_conf_error = None
        if conf != self.volcano_conf:
            self.volcano_conf = conf
            for gang in self.gangs.values():
                gang.blocked_epoch = -1
            self._capacity_changed()

    def _start_operator_pods(self, node_name: str) -> None:
        """The GPU Operator's DaemonSets reach a new GPU node (see :mod:`kubesim.operator`)."""
        if self.store.get(self.types.nodes, "", node_name) is None:
            return
        for app in (DEVICE_PLUGIN, DCGM_EXPORTER):
            if self.store.get(self.types.pods, OPERATOR_NS, pod_name(app, node_name)) is None:
                n = next(self._operator_ip)
                pod_ip = f"10.245.{(n // 250) % 250}.{n % 250 + 2}"
                pod = operator_pod(
                    app, node_name, self._node_ip(node_name), pod_ip, self.now_text()
                )
                self.store.create(self.types.pods, pod)

    def device_plugin_fails(self, node_name: str) -> None:
        """The node's device plugin crashes (say, a driver/toolkit mismatch): its pod goes to
        CrashLoopBackOff and the kubelet advertises 0 of every NVIDIA GPU resource, so a pod
        asking for one stays Pending with "Insufficient nvidia.com/gpu"."""
        with self.lock:
            node = self._node(node_name)
            status = dict(node["status"])
            for part in ("capacity", "allocatable"):
                status[part] = {
                    k: ("0" if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-") else v)
                    for k, v in (status.get(part) or {}).items()
                }
            self.store.replace(
                self.types.nodes, {**node, "metadata": dict(node["metadata"]), "status": status}
            )
            pod = self.store.get(self.types.pods, OPERATOR_NS, pod_name(DEVICE_PLUGIN, node_name))
            if pod is not None:
                self.store.replace(self.types.pods, crashing(pod, 5, self.now_text()))
            self.settle()

    def _capacity_changed(self) -> None:
        self.capacity_epoch += 1
        self.sched_dirty = True

    # ==================================================================================
    # public operations (called by the API layer or the Python API)
    # ==================================================================================
    def next_cluster_ip(self) -> str:
        """A Service's virtual IP from the default service CIDR (10.96.0.0/12)."""
        n = next(self._cluster_ip)
        return f"10.96.{(n // 250) % 250}.{n % 250 + 1}"

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
                            "deletionTimestamp": wall_text(),
                            "finalizers": finalizers,
                        },
                    },
                )
            finalizers = list(obj["metadata"].get("finalizers") or [])
            if finalizers:
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                return self.store.replace(
                    self.types.jobs,
                    {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": wall_text()}},
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
                    "metadata": {**obj["metadata"], "deletionTimestamp": wall_text()},
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
            for obj in self.store.select(self.types.configmaps, name):
                self.store.delete(self.types.configmaps, name, obj["metadata"]["name"])
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
        if is_ready(self.store.get(self.types.nodes, "", name) or {}):
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

    def drain(self, name: str) -> None:
        """``kubectl drain``: cordon the node, then evict each of its pods (a graceful delete
        through the eviction API; Volcano sees PodEvicted)."""
        self.cordon(name, True)
        with self.lock:
            node = self.scheduler.nodes.get(name)
            for key in sorted(node.pods) if node is not None else []:
                pod = self.pods.get(key)
                if pod is not None and not pod.deleting:
                    self.delete_pod(pod, grace=self.settings.pod_termination_seconds, evicted=True)
            self.settle()

    def out_of_service(self, name: str, on: bool = True) -> None:
        """Add (or remove) the ``node.kubernetes.io/out-of-service:NoExecute`` taint, with
        which an admin vouches that a NotReady node is really down: the pod GC then
        force-deletes the pods left Terminating there."""
        with self.lock:
            obj = self._node(name)
            taints = [
                t for t in obj["spec"].get("taints") or [] if t.get("key") != OUT_OF_SERVICE_TAINT
            ]
            if on:
                taints.append(
                    {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}
                )
            spec = {k: v for k, v in obj["spec"].items() if k != "taints"}
            if taints:
                spec["taints"] = taints
            self.store.replace(
                self.types.nodes, {**obj, "metadata": dict(obj["metadata"]), "spec": spec}
            )
            self.settle()

    def delete_node(self, name: str) -> None:
        """The Node object deleted (an admin, or the cloud node lifecycle controller for a VM
        that is gone): the pod GC force-deletes the pods still bound to it."""
        with self.lock:
            self._node(name)
            self.store.delete(self.types.nodes, "", name)
            self.settle()

    def _node_reach(self, name: str | None) -> str:
        """Whether a kubelet can confirm a pod's end on node ``name``: "ready", "unreachable"
        (not Ready), "out-of-service" (not Ready, but an admin vouched it is down: the pod GC
        force-deletes its pods) or "gone" (no such Node)."""
        obj = self.store.get(self.types.nodes, "", name) if name else None
        if obj is None:
            return "gone"
        if is_ready(obj):
            return "ready"
        taints = obj.get("spec", {}).get("taints") or []
        if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints):
            return "out-of-service"
        return "unreachable"

    def _node(self, name: str) -> dict[str, Any]:
        obj = self.store.get(self.types.nodes, "", name)
        if obj is None:
            raise KeyError(f"no node named {name!r}")
        return obj

    def set_queue_state(self, name: str, state: str) -> None:
        """Open or close a queue, exactly as an ``OpenQueue``/``CloseQueue`` Command does.

        Closing a queue that still has PodGroups leaves it ``Closing`` until the last one is
        deleted (then ``Closed``), as Volcano's queue controller does.
        """
        if state not in ("Open", "Closed"):
            raise ValueError("state must be Open or Closed")
        with self.lock:
            if self.store.get(self.types.queues, "", name) is None:
                raise KeyError(f"no queue named {name!r}")
            self.queue_action(name, "OpenQueue" if state == "Open" else "CloseQueue")
            self.settle()

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
                        "lastTimestamp": wall_text(),
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
            "firstTimestamp": wall_text(),
            "lastTimestamp": wall_text(),
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
