"""The NVIDIA GPU Operator's per-node pods in ``gpu-operator``: device plugin and DCGM exporter.

A cluster set up as the guide says runs, on every GPU node, a device plugin (it advertises
``nvidia.com/gpu`` to the kubelet) and a DCGM exporter (GPU metrics for Prometheus), both from
DaemonSets in ``gpu-operator``. kubesim creates them when a node with
``nvidia.com/gpu.present=true`` registers, bound and Running, with the labels the operator
uses (``app=nvidia-device-plugin-daemonset``, ``app=nvidia-dcgm-exporter``), so ``kubectl get
pods -n gpu-operator -o wide`` looks as it does on a real cluster. They request nothing, are
not the simulated kubelet's (no lifecycle) and are never scheduled.

When a node's device plugin breaks (:meth:`kubesim.sim.Simulation.device_plugin_fails`), its
pod goes to CrashLoopBackOff and the node advertises 0 GPUs: pods asking for one stay Pending
with "Insufficient nvidia.com/gpu", the guide's first failure.
"""

from __future__ import annotations

import hashlib
from typing import Any

NAMESPACE = "gpu-operator"
DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"
DCGM_EXPORTER = "nvidia-dcgm-exporter"
IMAGES = {
    DEVICE_PLUGIN: ("nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"),
    DCGM_EXPORTER: (
        "nvidia-dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04",
    ),
}


def is_gpu_node(node: dict[str, Any]) -> bool:
    """Nodes GPU Feature Discovery labelled as having NVIDIA GPUs."""
    labels = node["metadata"].get("labels") or {}
    return labels.get("nvidia.com/gpu.present") == "true"


def pod_name(app: str, node_name: str) -> str:
    """A DaemonSet pod's name: the DaemonSet's plus a suffix stable for the node."""
    digest = hashlib.sha1(f"{app}/{node_name}".encode()).hexdigest()  # noqa: S324 - a name
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(alphabet[int(digest[i : i + 2], 16) % len(alphabet)] for i in range(0, 10, 2))
    return f"{app}-{suffix}"


def operator_pod(app: str, node_name: str, host_ip: str, pod_ip: str, now: str) -> dict[str, Any]:
    """A Running, Ready operator pod bound to ``node_name``."""
    container, image = IMAGES[app]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(app, node_name),
            "namespace": NAMESPACE,
            "labels": {"app": app, "app.kubernetes.io/managed-by": "gpu-operator"},
        },
        "spec": {
            "nodeName": node_name,
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "priorityClassName": "system-node-critical",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": app.removesuffix("-daemonset"),
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": container, "image": image, "resources": {}}],
        },
        "status": {
            "phase": "Running",
            "qosClass": "BestEffort",
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": None}
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": container,
                    "image": image,
                    "imageID": image,
                    "containerID": f"containerd://{hashlib.sha1(node_name.encode()).hexdigest()}",  # noqa: S324
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        },
    }


def crashing(pod: dict[str, Any], restarts: int, now: str) -> dict[str, Any]:
    """The device plugin pod of a broken node: CrashLoopBackOff, not Ready."""
    status = dict(pod["status"])
    statuses = []
    for container in status.get("containerStatuses") or []:
        statuses.append(
            {
                **container,
                "ready": False,
                "started": False,
                "restartCount": restarts,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 5m0s restarting failed container",
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
        )
    status["containerStatuses"] = statuses
    status["conditions"] = [
        {**c, "status": "False", "lastTransitionTime": now}
        if c["type"] in ("Ready", "ContainersReady")
        else c
        for c in status.get("conditions") or []
    ]
    return {**pod, "metadata": dict(pod["metadata"]), "status": status}


def operator_log(pod: dict[str, Any]) -> list[str]:
    """What the operator pod's container printed."""
    app = (pod["metadata"].get("labels") or {}).get("app")
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    if app == DEVICE_PLUGIN:
        if "waiting" in (statuses[0].get("state") or {}):
            return [
                "I1207 Starting FS watcher.",
                "I1207 Starting OS watcher.",
                "E1207 Failed to initialize NVML: could not load NVML library.",
                "E1207 If this is a GPU node, did you set the docker default runtime to `nvidia`?",
                "F1207 error starting plugins: error creating plugin manager: unable to create "
                "plugin manager: nvml init failed: ERROR_LIBRARY_NOT_FOUND",
            ]
        return [
            "I1207 Starting FS watcher.",
            "I1207 Starting OS watcher.",
            "I1207 Starting Plugins.",
            "I1207 Starting GRPC server for 'nvidia.com/gpu'",
            "I1207 Registered device plugin for 'nvidia.com/gpu' with Kubelet",
        ]
    return [
        'time="2026-01-01T00:00:00Z" level=info msg="DCGM successfully initialized!"',
        'time="2026-01-01T00:00:00Z" level=info msg="Starting webserver"',
        'time="2026-01-01T00:00:00Z" level=info msg="Listening on" address="[::]:9400"',
    ]
