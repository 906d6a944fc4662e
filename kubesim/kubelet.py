"""The simulated kubelet, as a mixin: container start-up, run time, exit, restarts.

A bound pod sits in ContainerCreating for ``podStartupSeconds``, then runs for its duration
(``kubesim.gpupool.dev/duration-seconds``, a ``sleep N`` in the command, or the default) and
exits with 0 or the configured failure. ``restartPolicy`` decides whether the container is
restarted in place (CrashLoopBackOff) or the pod ends Succeeded/Failed. A pod with
``activeDeadlineSeconds`` is failed (reason ``DeadlineExceeded``) that long after its startTime.
A container with a ``readinessProbe`` starts unready (``Ready=False``, ``ContainersNotReady``)
and becomes Ready ``readinessSeconds`` after its probe's ``initialDelaySeconds``; without one,
a running pod is Ready at once.
A container whose env names a Secret (or a key of one) that does not exist waits in
``CreateContainerConfigError`` until it does. Deletion is graceful: Terminating for
``podTerminationSeconds``, then gone (:mod:`kubesim.pod_deletion`); the containers' logs are
:mod:`kubesim.pod_logs`.
"""

from __future__ import annotations

import re
from typing import Any

from kubesim.clock import rfc3339
from kubesim.gpuinfo import device_count, is_gpu_resource, is_nvidia_smi
from kubesim.objects import (
    DURATION,
    EXIT_CODE,
    FAIL,
    FAIL_AFTER,
    FAIL_ATTEMPTS,
    annotation_float,
    image_pull_fails,
    sleep_seconds,
)
from kubesim.runtime import (
    PodRuntime,
    add_resources,
)

# The kubelet's own words (pkg/kubelet/active_deadline.go).
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"

_INT = re.compile(r"-?[0-9]{1,9}")  # ASCII digits: isdigit() also takes "¹"
_READY_TYPES = frozenset({"Ready", "ContainersReady"})


def _readiness_delay(containers: list[dict[str, Any]], base: float) -> float | None:
    """How long after start a pod's readiness probes first pass (``readinessSeconds`` after the
    longest ``initialDelaySeconds``), or None when no container has a readiness probe (the
    pod is Ready as soon as it runs, as a real kubelet makes it)."""
    delays = [
        float((c.get("readinessProbe") or {}).get("initialDelaySeconds") or 0)
        for c in containers
        if c.get("readinessProbe")
    ]
    return max(delays) + base if delays else None


class Kubelet:
    """Kubelet methods of :class:`kubesim.sim.Simulation`.

    A mixin: it relies on the simulation's store, types, settings, pods, queues and scheduler (see
    :class:`kubesim.sim.Simulation`), and is split out only to keep each concern readable.
    """

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
        self._take_devices(pod, node_name)
        queue = self.queues.get(pod.queue)
        if queue is not None:
            add_resources(queue.allocated, pod.req)
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
        meta = obj["metadata"]
        state = self.scheduler.nodes.get(node_name)
        # A share's scheduler writes the devices it chose on the pod (HAMi's protocol; Volcano's
        # deviceshare plugin alike): how a reader learns which device the share holds.
        placed = state.devices.allocation(pod.key, node_name) if state and state.devices else {}
        if placed:
            meta = {**meta, "annotations": {**(meta.get("annotations") or {}), **placed}}
        self._replace_pod(
            obj, metadata=meta, spec={**obj["spec"], "nodeName": node_name}, status=status
        )
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
        deadline = obj["spec"].get("activeDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0:
            # Counted from status.startTime (set just above), whatever the containers do.
            self.after(float(deadline), self._deadline_check, pod, status["startTime"])
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _deadline_check(self, pod: PodRuntime, start_time: str) -> None:
        """``activeDeadlineSeconds`` passed since the pod's startTime: as the kubelet's
        ``pastActiveDeadline``, the pod is killed and ends Failed, reason DeadlineExceeded
        (Volcano then sees PodFailed). A pod that finished, is being deleted or was replaced
        (a new pod of the same name has another startTime) is left alone."""
        if pod.terminal or pod.deleting or self.pods.get(pod.key) is not pod:
            return
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None or (obj.get("status") or {}).get("startTime") != start_time:
            return
        self._fail_pod(pod, DEADLINE_REASON, DEADLINE_MESSAGE)
        self.record_event(obj, "Normal", DEADLINE_REASON, DEADLINE_MESSAGE, component="kubelet")

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
        problem = self._container_config_error(obj)
        if problem is not None:
            self._wait_for_config(pod, obj, problem)
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
        probed = _readiness_delay(containers, self.settings.readiness_seconds)
        status = {
            **obj["status"],
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp, "lastProbeTime": None}
                if probed is None or t not in _READY_TYPES
                else {
                    "type": t,
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: "
                    f"[{' '.join(c['name'] for c in containers if c.get('readinessProbe'))}]",
                    "lastTransitionTime": stamp,
                    "lastProbeTime": None,
                }
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
        if probed is not None:
            for cs, c in zip(status["containerStatuses"], containers, strict=True):
                cs["ready"] = not c.get("readinessProbe")
        self._replace_pod(obj, status=status)
        run_for = self._run_time(obj, pod)
        pod.gen += 1
        if run_for is not None:
            self.after(run_for, self._finish_container, pod, pod.gen)
        if probed is not None:
            self.after(probed, self._readiness_passed, pod, pod.gen)
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _readiness_passed(self, pod: PodRuntime, gen: int) -> None:
        """The readiness probes succeed: the pod and its containers become Ready (and, in a
        real cluster, the pod an endpoint of every Service selecting it)."""
        if pod.gen != gen or pod.deleting or pod.state != "running":
            return
        obj = self.store.get(self.types.pods, *pod.key)
        if obj is None or obj["status"].get("phase") != "Running":
            return
        stamp = rfc3339(self.now())
        conditions = [
            {
                "type": c["type"],
                "status": "True",
                "lastTransitionTime": stamp,
                "lastProbeTime": None,
            }
            if c["type"] in _READY_TYPES
            else c
            for c in obj["status"].get("conditions") or []
        ]
        statuses = [
            {**cs, "ready": True} if (cs.get("state") or {}).get("running") else cs
            for cs in obj["status"].get("containerStatuses") or []
        ]
        self._replace_pod(
            obj, status={**obj["status"], "conditions": conditions, "containerStatuses": statuses}
        )
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _container_config_error(self, obj: dict[str, Any]) -> str | None:
        """Why the kubelet cannot build the containers' config, in its words: an env variable
        from a Secret (``valueFrom.secretKeyRef``) that is not there, unless ``optional``."""
        namespace = obj["metadata"].get("namespace", "")
        for container in obj["spec"]["containers"]:
            for var in container.get("env") or []:
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                if not ref or ref.get("optional"):
                    continue
                name, key = ref.get("name", ""), ref.get("key", "")
                secret = self.store.get(self.types.secrets, namespace, name)
                if secret is None:
                    return f'secret "{name}" not found'
                if key not in (secret.get("data") or {}):
                    return f"couldn't find key {key} in Secret {namespace}/{name}"
        return None

    def _wait_for_config(self, pod: PodRuntime, obj: dict[str, Any], problem: str) -> None:
        """CreateContainerConfigError: the pod stays Pending, its containers waiting, and the
        kubelet tries again every ``configRetrySeconds`` (a Secret created meanwhile lets it
        start). The event is recorded when the problem is first seen or changes."""
        containers = obj["spec"]["containers"]
        seen = (obj["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("waiting")
        pod.state = "waiting"
        status = {
            **obj["status"],
            "containerStatuses": [
                self._container_status(c, waiting=("CreateContainerConfigError", problem))
                for c in containers
            ],
        }
        self._replace_pod(obj, status=status)
        if seen != {"reason": "CreateContainerConfigError", "message": problem}:
            self.record_event(obj, "Warning", "Failed", f"Error: {problem}", component="kubelet")
        pod.gen += 1
        self.after(self.settings.config_retry_seconds, self._start_container, pod, pod.gen)
        if pod.job is not None:
            self.dirty_jobs[pod.job.key] = None

    def _outcome(self, obj: dict[str, Any], pod: PodRuntime) -> tuple[int, str] | None:
        """(exit code, reason) when this attempt is configured to fail, else None."""
        annotations = obj["metadata"].get("annotations") or {}
        fail = annotations.get(FAIL)
        if fail in ("ImagePullBackOff", "ErrImagePull"):
            return None  # never gets to run: handled when the container would start
        code_text = annotations.get(EXIT_CODE)
        code = int(code_text) if code_text and _INT.fullmatch(code_text) else None
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
        if duration is None and all(
            is_nvidia_smi(c) for c in obj["spec"].get("containers") or [{}]
        ):
            duration = 1.0  # nvidia-smi prints and exits
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

    def _take_devices(self, pod: PodRuntime, node_name: str) -> None:
        """The device plugin's part: the lowest free device numbers of each GPU resource."""
        pod.devices = {}
        node = self.store.get(self.types.nodes, "", node_name) or {}
        for resource, milli in sorted(pod.req.items()):
            if not is_gpu_resource(resource) or milli < 1000:
                continue
            taken = self.gpu_slots.setdefault((node_name, resource), set())
            total = max(device_count(node, resource), 1)
            chosen = []
            for number in range(total):
                if len(chosen) == milli // 1000:
                    break
                if number not in taken:
                    chosen.append(number)
            while len(chosen) < milli // 1000:  # shared GPUs: more pods than devices
                chosen.append(len(chosen) % total)
            taken.update(chosen)
            pod.devices[resource] = chosen

    def _give_back_devices(self, pod: PodRuntime) -> None:
        for resource, numbers in pod.devices.items():
            taken = self.gpu_slots.get((pod.node or "", resource))
            if taken is not None:
                taken.difference_update(numbers)

    def _release(self, pod: PodRuntime) -> None:
        self._give_back_devices(pod)
        node = self.scheduler.nodes.get(pod.node) if pod.node is not None else None
        if node is not None and pod.key in node.pods:
            self.scheduler.release(node.name, pod.key, pod.req)
            queue = self.queues.get(pod.queue)
            if queue is not None:
                add_resources(queue.allocated, pod.req, -1)
                self.dirty_queues.add(pod.queue)
            self._capacity_changed()
