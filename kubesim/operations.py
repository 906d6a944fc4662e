"""The simulation's public operations, called by the API layer (deleting jobs, pods and
namespaces with Kubernetes' cascades) and by tests and the control API (node failures, cordon,
drain, out-of-service taints, node deletion, queue states).
"""

from __future__ import annotations

from typing import Any

from kubesim.clock import rfc3339, wall_text
from kubesim.runtime import PodRuntime, is_ready
from kubesim.scheduler import (
    NOT_READY_TAINT,
    OUT_OF_SERVICE_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
)


class ClusterOperations:
    """Public operations of :class:`kubesim.sim.Simulation`.

    A mixin: every attribute it uses is set in ``Simulation.__init__``.
    """

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
