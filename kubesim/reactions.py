"""What the simulation does when the store changes: every write calls
:meth:`StoreReactions.on_event`, which marks jobs, queues or the scheduler dirty (nothing is
polled), and a few writes act at once: the Volcano scheduler's ConfigMap is reloaded, a new GPU
node gets the GPU Operator's pods.
"""

from __future__ import annotations

import logging
from typing import Any

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
from kubesim.runtime import QueueState, is_ready
from kubesim.store import WatchEvent
from kubesim.volcano_conf import CONF_KEY, CONFIGMAP, NAMESPACE, ConfError, parse_conf

log = logging.getLogger("kubesim")


class StoreReactions:
    """Store-event methods of :class:`kubesim.sim.Simulation`.

    A mixin: every attribute it uses is set in ``Simulation.__init__``.
    """

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
