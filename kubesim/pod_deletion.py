"""The simulated kubelet's part in deleting a pod, as a mixin: graceful deletion (Terminating for
``podTerminationSeconds``, then gone), pods left Terminating on an unreachable node until it
comes back, and the pod's removal from the store, its job and its node's books.
"""

from __future__ import annotations

from typing import Any

from kubesim.clock import wall_text
from kubesim.runtime import PodRuntime


class PodDeletion:
    """Pod deletion methods of :class:`kubesim.sim.Simulation`.

    A mixin: it relies on the simulation's store, types, settings, pods and jobs, and on the
    kubelet's books (:class:`kubesim.kubelet.Kubelet`); split out only to keep each concern
    readable.
    """

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
        reach = self._node_reach(pod.node)
        if reach == "gone":  # the pod GC force-deletes pods of a deleted Node
            return self._remove_pod(pod, evicted=evicted)
        pod.deleting = True
        pod.gen += 1
        if reach == "unreachable":
            return self._delete_unconfirmed(pod, obj, grace, evicted=evicted)
        delay = min(grace, self.settings.pod_termination_seconds)
        new = self._replace_pod(
            obj,
            metadata={
                **obj["metadata"],
                "deletionTimestamp": wall_text(grace),
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

    def _delete_unconfirmed(
        self, pod: PodRuntime, obj: dict[str, Any], grace: float, *, evicted: bool
    ) -> dict[str, Any]:
        """A pod deleted on an unreachable node: the API server sets its deletionTimestamp,
        but no kubelet confirms the end, so it stays Terminating (and on its node's books)
        until the node comes back, its Node is deleted, or it gets the out-of-service taint
        (:meth:`unconfirmed_release`). Volcano reacts to the deletionTimestamp itself (its
        pod update handler treats it as the delete), so the job hears PodEvicted now."""
        pod.unconfirmed = True
        new = self._replace_pod(
            obj,
            metadata={
                **obj["metadata"],
                "deletionTimestamp": wall_text(grace),
                "deletionGracePeriodSeconds": int(grace),
            },
        )
        if evicted:
            self.record_event(
                obj,
                "Normal",
                "TaintManagerEviction",
                f"Marking for deletion Pod {pod.key[0]}/{pod.key[1]}",
                component="taint-eviction-controller",
            )
        if pod.job is not None:
            if not pod.killed_by_controller and not pod.terminal:
                pod.job.inbox.append(("PodEvicted", pod))
                pod.killed_by_controller = True  # told once: its later removal is not news
            self.dirty_jobs[pod.job.key] = None
        return new

    def unconfirmed_release(self, node: str, *, force: bool) -> None:
        """End the pods left Terminating on ``node``: after their grace period once its
        kubelet reports again, or at once (``force``) when the pod GC takes them (the Node was
        deleted, or it carries ``node.kubernetes.io/out-of-service``)."""
        for pod in [p for p in self.pods.values() if p.unconfirmed and p.node == node]:
            pod.unconfirmed = False
            pod.gen += 1
            if force:
                self.after(0.0, self._terminated, pod, pod.gen, False)
            else:
                delay = self.settings.pod_termination_seconds
                self.after(delay, self._terminated, pod, pod.gen, False)

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
