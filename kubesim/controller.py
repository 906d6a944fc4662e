"""The Volcano job controller (``pkg/controllers/job``) and queue status, as a mixin.

Reconciles one dirty job at a time: applies lifecycle policies to pod events, moves the phase
(Pending -> Running -> Completed/Failed, Restarting, Aborting, Completing, Terminating),
creates the ``<job>-<task>-<index>`` pods once the PodGroup is Inqueue (built by
:mod:`kubesim.job_pods`), and writes the status counters. Phase rules follow
``pkg/controllers/job/state`` of Volcano v1.15.
"""

from __future__ import annotations

from typing import Any

from kubesim.clock import rfc3339
from kubesim.objects import (
    pod_requests,
)
from kubesim.quantity import resource_list_format
from kubesim.runtime import (
    ACTIVE_JOB_PHASES,
    TERMINAL_JOB_PHASES,
    Gang,
    JobRuntime,
    PodRuntime,
    TaskInfo,
    duration_text,
    pod_phase,
)
from kubesim.scheduler import (
    PodConstraints,
)


class JobController:
    """Job controller methods of :class:`kubesim.sim.Simulation`."""

    # ==================================================================================
    # jobs: cache
    # ==================================================================================
    def _parse_tasks(self, job: dict[str, Any]) -> list[TaskInfo]:
        tasks = []
        for index, task in enumerate(job["spec"].get("tasks") or []):
            template = task.get("template") or {}
            spec = template.get("spec") or {}
            replicas = int(task.get("replicas", 0))
            req = pod_requests(spec)
            constraints = PodConstraints.from_spec(
                spec, (template.get("metadata") or {}).get("annotations")
            )
            tasks.append(
                TaskInfo(
                    name=task.get("name") or f"default{index}",
                    replicas=replicas,
                    min_available=int(task.get("minAvailable", replicas)),
                    template=template,
                    policies=list(task.get("policies") or []),
                    req=req,
                    constraints=constraints,
                    shape=(constraints.signature, tuple(sorted(req.items()))),
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
                    if (job.key[0], name) in self.pods:
                        # A pod of that name from an earlier Job of this name is still
                        # Terminating (its node unreachable): the create would be refused
                        # AlreadyExists, which Volcano ignores; the pod is made once it goes.
                        continue
                    self._create_pod(job, obj, task, index)
                    created = True
        for name, pod in list(job.pods.items()):
            if name not in wanted and not pod.deleting:
                self.delete_pod(pod, by_controller=True)
        if created or any(p.state == "pending" and not p.deleting for p in job.pods.values()):
            gang.blocked_epoch = -1
            self.gangs[job.key] = gang
            self.sched_dirty = True

    def _write_job_status(self, job: JobRuntime, obj: dict[str, Any]) -> None:
        counts = self._counts(job)
        task_counts: dict[str, dict[str, dict[str, int]]] = {}
        for pod in job.pods.values():
            phase = pod_phase(pod)
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
            status["runningDuration"] = duration_text(end - job.running_since)
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
        # The garbage collector's part for the rest of what the job owns (an inference job's
        # Service and Ingress): gone with it unless they name another owner too.
        for rt in (self.types.services, self.types.ingresses):
            for owned in self.store.select(rt, job.key[0]):
                owners = owned["metadata"].get("ownerReferences") or []
                if owners and all(o.get("uid") == job.uid for o in owners):
                    self.store.delete(rt, job.key[0], owned["metadata"]["name"])
        self._drop_gang(job)
        self.dirty_jobs.pop(job.key, None)

    def _ttl_expired(self, job: JobRuntime) -> None:
        obj = self._job_obj(job)
        if obj is not None and job.phase in TERMINAL_JOB_PHASES:
            self.store.delete(self.types.jobs, *job.key)

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
