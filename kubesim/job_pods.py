"""The Volcano job controller's pods, as a mixin: the ``<job>-<task>-<index>`` pods it creates
from a task's template (labels, annotations and defaults Volcano and the API server add, built
once per task and job version), with the env, svc and pytorch plugins' visible effects.
"""

from __future__ import annotations

from typing import Any

from kubesim.objects import clone, normalize_container, owner_reference, qos_class
from kubesim.runtime import JobRuntime, PodRuntime, TaskInfo
from kubesim.scheduler import NOT_READY_TAINT, UNREACHABLE_TAINT


class JobPods:
    """Pod creation methods of the job controller (:class:`kubesim.controller.JobController`)
    in :class:`kubesim.sim.Simulation`; split out only to keep each concern readable.
    """

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
            shape=task.shape,
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
