"""The Volcano scheduler cycle (enqueue + allocate actions, gang plugin), as a mixin.

What runs follows ``volcano-system/volcano-scheduler-configmap`` (:mod:`kubesim.volcano_conf`):
with Volcano's default configuration everything below applies; without ``gang`` placement is
pod by pod, without ``predicates`` selectors and taints are not checked, without
``proportion``/``capacity`` queue capabilities are not enforced, without ``overcommit`` enqueue
does not check the cluster's idle resources, without ``binpack`` pods spread.

``enqueue`` admits a PodGroup when its queue is Open, the queue's capability still has room
for ``minResources`` and the cluster (times the overcommit factor) is not already promised
away; only then does the job controller create pods. ``allocate`` places a gang's pending
pods all-or-nothing via :class:`kubesim.scheduler.Scheduler`, in Open queues only, and
explains failures on the PodGroup (condition + event), on the pods (PodScheduled=False +
FailedScheduling) and on the Job (PodGroupPending), in Volcano's words.
"""

from __future__ import annotations

import math
import time
from typing import Any

from kubesim.devices import DEVICE_ONLY
from kubesim.objects import (
    owner_reference,
)
from kubesim.quantity import format_milli, resource_list_format
from kubesim.runtime import (
    ACTIVE_JOB_PHASES,
    Gang,
    JobRuntime,
    PodRuntime,
    add_resources,
)
from kubesim.scheduler import (
    GangPod,
    PodConstraints,
)
from kubesim.volcano_conf import SchedulerConf

# Without the predicates plugin nothing static is checked: every taint is as good as tolerated.
_NO_PREDICATES = PodConstraints({}, (), ({"operator": "Exists"},), "<no predicates>")


class VolcanoScheduler:
    """Scheduler methods of :class:`kubesim.sim.Simulation`.

    A mixin: it relies on the simulation's scheduler, store, queues, gangs, jobs and settings (see
    :class:`kubesim.sim.Simulation`), and is split out only to keep each concern readable.
    """

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
                add_resources(queue.reserved, gang.min_resources, -1)
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
        started = time.thread_time()
        self.sched_dirty = False
        self.stats.scheduling_cycles += 1
        failed_shapes: dict[Any, str] = {}
        conf = self.volcano_conf
        for key, gang in sorted(self.gangs.items(), key=lambda item: item[1].seq):
            job = gang.job
            if self.jobs.get(key) is not job or job.phase not in ACTIVE_JOB_PHASES:
                self.gangs.pop(key, None)
                continue
            if gang.blocked_epoch == self.capacity_epoch:
                continue
            volcano = job.scheduler_name == "volcano"
            if gang.phase == "Pending":
                if volcano and conf.enqueue and not self._enqueue(gang):
                    continue
                gang.phase = "Inqueue"
                self.dirty_jobs[key] = None
                self.dirty_queues.add(gang.queue)
                continue  # pods are created by the controller, then allocated
            pending = [p for p in job.pods.values() if p.state == "pending" and not p.deleting]
            if not pending:
                self.gangs.pop(key, None)
                continue
            if volcano and not conf.allocate:
                gang.blocked_epoch = self.capacity_epoch  # nothing binds until allocate is back
                continue
            pending.sort(key=lambda p: (self._task_order(job, p.task), p.index))
            ready = sum(1 for p in job.pods.values() if p.node is not None and not p.deleting)
            need = max(job.min_available - ready, 0) if volcano and conf.gang else 0
            shape = (tuple(p.shape for p in pending), need, gang.queue)
            if shape in failed_shapes:
                self._unschedulable(gang, pending, failed_shapes[shape], need)
                continue
            queue = self.queues.get(gang.queue)
            if volcano and queue is not None and queue.state != "Open":
                # proportion's AllocatableFn: a queue that is not Open gets nothing allocated,
                # even for gangs enqueued before it was closed
                message = f'queue "{gang.queue}" is {queue.state}; only Open queues are allocated'
                self._unschedulable(gang, pending, message, need, reason="QueueNotOpen")
                continue
            candidates, quota_error = pending, None
            if not volcano or conf.queue_capacity:
                candidates, quota_error = self._within_capability(gang, pending, need)
            if quota_error:
                self._unschedulable(gang, pending, quota_error, need, reason="NotEnoughResources")
                continue
            placement = self.scheduler.place_gang(
                [
                    GangPod(
                        p.key,
                        p.req,
                        _constraints(conf, p.constraints) if volcano else p.constraints,
                        p.shape,
                    )
                    for p in candidates
                ],
                need,
                spread=volcano and not conf.binpack,
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
        self.stats.scheduling_seconds += time.thread_time() - started

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
        elif queue.capability is not None and self.volcano_conf.queue_capacity:
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
        if message is None and self.volcano_conf.overcommit:
            factor = self.settings.overcommit_factor
            reserved_total: dict[str, int] = {}
            for q in self.queues.values():
                add_resources(reserved_total, q.reserved)
            for res, need in sorted(gang.min_resources.items()):
                if res in DEVICE_ONLY:  # no node advertises it: deviceshare checks per device
                    continue
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
            add_resources(queue.reserved, gang.min_resources)
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


def _constraints(conf: SchedulerConf, constraints: PodConstraints) -> PodConstraints:
    """The static constraints the configured predicates plugin checks for a pod."""
    if not conf.predicates:
        if constraints.devices == _NO_PREDICATES.devices:
            return _NO_PREDICATES
        # The device pins are deviceshare's (or HAMi's), not the predicates plugin's.
        return PodConstraints(
            {},
            (),
            _NO_PREDICATES.tolerations,
            f"{_NO_PREDICATES.signature}{constraints.signature}",
            constraints.devices,
        )
    if not conf.node_affinity and (constraints.node_selector or constraints.affinity_terms):
        return PodConstraints(
            {},
            (),
            constraints.tolerations,
            f"{constraints.signature}<no node affinity>",
            constraints.devices,
        )
    return constraints
