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

This module holds the state and the bootstrap; each concern is a mixin of its own: the loop
(:mod:`kubesim.loop`), reactions to store writes (:mod:`kubesim.reactions`), the public
operations (:mod:`kubesim.operations`), the job controller (and its pods), the Volcano scheduler,
the kubelet (with pod deletion and logs) and the Command controllers.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from kubesim.clock import SimClock, wall_text
from kubesim.commands import CommandController
from kubesim.config import GPU_CATALOG, ClusterConfig, SimSettings, build_nodes
from kubesim.controller import JobController
from kubesim.job_pods import JobPods
from kubesim.kubelet import Kubelet
from kubesim.loop import SimLoop
from kubesim.objects import clone, object_reference
from kubesim.operations import ClusterOperations
from kubesim.pod_deletion import PodDeletion
from kubesim.pod_logs import PodLogs
from kubesim.reactions import StoreReactions
from kubesim.resources import Types
from kubesim.runtime import (
    BUILTIN_NAMESPACES,
    INSTALLED_NAMESPACES,
    Gang,
    JobRuntime,
    PodRuntime,
    QueueState,
    Stats,
)
from kubesim.scheduler import Scheduler
from kubesim.store import Store
from kubesim.volcano import VolcanoScheduler
from kubesim.volcano_conf import CONFIGMAP, DEFAULT, NAMESPACE, configmap


class Simulation(
    SimLoop,
    StoreReactions,
    ClusterOperations,
    JobController,
    JobPods,
    VolcanoScheduler,
    Kubelet,
    PodDeletion,
    PodLogs,
    CommandController,
):
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
