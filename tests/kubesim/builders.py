"""Builders for Volcano manifests, so tests say only what matters to them."""

from __future__ import annotations

from typing import Any

from kubernetes import client

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
SCHED = "scheduling.volcano.sh"


def vcjob(
    name: str,
    *,
    namespace: str = "team-a",
    queue: str = "team-a",
    replicas: int = 1,
    gpus: int | str = 1,
    gpu_resource: str = "nvidia.com/gpu",
    min_available: int | None = None,
    duration: float | None = 60,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    policies: list[dict[str, str]] | None = None,
    task_policies: list[dict[str, str]] | None = None,
    restart_policy: str = "Never",
    max_retry: int | None = None,
    image: str = "example/trainer:1.0",
    command: list[str] | None = None,
    labels: dict[str, str] | None = None,
    extra_tasks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A one-task Volcano Job asking ``gpus`` per replica."""
    job_annotations = dict(annotations or {})
    if duration is not None:
        job_annotations.setdefault("kubesim.gpupool.dev/duration-seconds", str(duration))
    container: dict[str, Any] = {
        "name": "trainer",
        "image": image,
        "resources": {"limits": {gpu_resource: gpus}} if gpus else {},
    }
    if command:
        container["command"] = command
    pod_spec: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [container]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    task: dict[str, Any] = {"name": "worker", "replicas": replicas, "template": {"spec": pod_spec}}
    if task_policies:
        task["policies"] = task_policies
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": queue,
        "tasks": [task, *(extra_tasks or [])],
    }
    if min_available is not None:
        spec["minAvailable"] = min_available
    if policies:
        spec["policies"] = policies
    if max_retry is not None:
        spec["maxRetry"] = max_retry
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": job_annotations,
    }
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": metadata, "spec": spec}


def create_job(custom: client.CustomObjectsApi, manifest: dict[str, Any], **kwargs: Any) -> dict:
    """POST a Volcano Job through the official client."""
    namespace = manifest["metadata"]["namespace"]
    return custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "jobs", manifest, **kwargs
    )


def get_job(custom: client.CustomObjectsApi, name: str, namespace: str = "team-a") -> dict:
    """GET a Volcano Job through the official client."""
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", name)


def phase(custom: client.CustomObjectsApi, name: str, namespace: str = "team-a") -> str:
    """``status.state.phase`` as the portal reads it."""
    return get_job(custom, name, namespace).get("status", {}).get("state", {}).get("phase", "")


def queue(name: str, weight: int = 1, capability: dict[str, Any] | None = None) -> dict:
    """A Volcano Queue manifest."""
    spec: dict[str, Any] = {"weight": weight}
    if capability:
        spec["capability"] = capability
    return {
        "apiVersion": f"{SCHED}/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


BUS = "bus.volcano.sh"


def command(
    name: str,
    action: str,
    *,
    target: str,
    uid: str = "0",
    kind: str = "Job",
    namespace: str = "team-a",
) -> dict:
    """A ``bus.volcano.sh/v1alpha1`` Command aimed at a Job (default) or a Queue."""
    api_version = f"{SCHED}/v1beta1" if kind == "Queue" else f"{GROUP}/{VERSION}"
    return {
        "apiVersion": f"{BUS}/v1alpha1",
        "kind": "Command",
        "metadata": {"name": name, "namespace": namespace},
        "action": action,
        "target": {"apiVersion": api_version, "kind": kind, "name": target, "uid": uid},
    }


def create_command(
    custom: client.CustomObjectsApi, manifest: dict[str, Any], **kwargs: Any
) -> dict:
    """POST a Command through the official client."""
    namespace = manifest["metadata"]["namespace"]
    return custom.create_namespaced_custom_object(
        BUS, "v1alpha1", namespace, "commands", manifest, **kwargs
    )
