"""The Volcano Job of an admitted portal job: tasks, pods, containers, resources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rules.volcano.names import (
    ANNOTATION_DISPLAY_NAME,
    ANNOTATION_PORTAL_URL,
    ANNOTATION_SUBMISSION_UID,
    CONTAINER_NAME,
    HOSTNAME_LABEL,
    INFERENCE_PORT_NAME,
    JOB_API_VERSION,
    JOB_KIND,
    LABEL_ATTEMPT,
    LABEL_GPU_MODEL,
    LABEL_JOB_ID,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MANAGED_BY,
    PORTAL_ENV_ATTEMPT,
    PORTAL_ENV_JOB_ID,
    PYTORCH_PORT,
    READINESS_PERIOD_SECONDS,
    SHM_VOLUME,
    TASK_MASTER,
    TASK_WORKER,
    _job_uuid,
    _task_layout,
    cpu_quantity,
    label_value,
    memory_quantity,
)
from rules.volcano.sharing import (
    HAMI_SCHEDULER,
    SHARING_HAMI,
)
from rules.volcano.spec import (
    VolcanoJobSpec,
)

# Policies, per kind (see the module docstring). Events never repeat within one list.
_TRAINING_POLICIES: Final[tuple[tuple[str, str], ...]] = (
    ("PodEvicted", "RestartJob"),
    ("PodFailed", "TerminateJob"),
)
_INFERENCE_POLICIES: Final[tuple[tuple[str, str], ...]] = (
    ("PodEvicted", "RestartPod"),
    ("PodFailed", "TerminateJob"),
)

# --- The builder, in small pieces ------------------------------------------------------------


def build_volcano_job(spec: VolcanoJobSpec) -> dict[str, Any]:
    """The ``batch.volcano.sh/v1alpha1`` Job for an admitted portal job."""
    layout, first = [], 0
    for name, replicas in _task_layout(spec.kind, spec.replicas):
        layout.append((name, first, replicas))
        first += replicas
    job_spec: dict[str, Any] = {
        "schedulerName": _scheduler_name(spec),
        "queue": spec.queue,
        "minAvailable": spec.replicas,
        "maxRetry": spec.max_retry,
        "policies": _policies(spec.kind),
        "plugins": _plugins(spec.kind),
        "tasks": [_task(spec, name, first, replicas) for name, first, replicas in layout],
    }
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    if spec.priority_class_name is not None:
        job_spec["priorityClassName"] = spec.priority_class_name
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": JOB_KIND,
        "metadata": _job_metadata(spec),
        "spec": job_spec,
    }


def _scheduler_name(spec: VolcanoJobSpec) -> str:
    """HAMi's shares are bound by its own scheduler (Volcano then neither gangs nor queues the
    pods: the portal's admission already did both); everything else by the cluster's."""
    if spec.gpu_share is not None and spec.gpu_share.mode == SHARING_HAMI:
        return HAMI_SCHEDULER
    return spec.scheduler_name


def _labels(spec: VolcanoJobSpec) -> dict[str, str]:
    """The portal's labels, on the Job and on every pod, so both can be selected alike."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TEAM: label_value(spec.team_slug),
        LABEL_JOB_ID: str(_job_uuid(spec.job_id)),
        LABEL_GPU_MODEL: label_value(spec.gpu_model),
        LABEL_KIND: spec.kind,
        LABEL_ATTEMPT: str(spec.attempt),
    }


def _annotations(spec: VolcanoJobSpec) -> dict[str, str]:
    return {
        ANNOTATION_SUBMISSION_UID: spec.submission_uid,
        ANNOTATION_PORTAL_URL: spec.portal_url,
        ANNOTATION_DISPLAY_NAME: spec.display_name,
    }


def _job_metadata(spec: VolcanoJobSpec) -> dict[str, Any]:
    return {
        "name": spec.job_name,
        "namespace": spec.namespace,
        "labels": _labels(spec),
        "annotations": _annotations(spec),
    }


def _policies(kind: str) -> list[dict[str, str]]:
    rules = _TRAINING_POLICIES if kind == "training" else _INFERENCE_POLICIES
    return [{"event": event, "action": action} for event, action in rules]


def _plugins(kind: str) -> dict[str, list[str]]:
    """``env`` for task indexes, ``svc`` for DNS names, ``pytorch`` for rank and world size."""
    if kind == "inference":
        return {"env": [], "svc": ["--disable-network-policy"]}
    return {
        "env": [],
        "svc": [],
        "pytorch": [f"--master={TASK_MASTER}", f"--worker={TASK_WORKER}", f"--port={PYTORCH_PORT}"],
    }


def _task(spec: VolcanoJobSpec, name: str, first: int, replicas: int) -> dict[str, Any]:
    """A task of ``replicas`` replicas, the first being portal replica ``first``."""
    hosts = spec.replica_hosts[first : first + replicas]
    devices = spec.replica_devices[first : first + replicas]
    return {
        "name": name,
        "replicas": replicas,
        "minAvailable": replicas,
        "maxRetry": spec.max_retry,
        "template": _pod_template(spec, hosts, devices),
    }


def _pod_template(
    spec: VolcanoJobSpec, hosts: Sequence[str], devices: Sequence[str] = ()
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": _labels(spec)}
    if spec.gpu_share is not None:
        # Pinned only when every replica of the task has its device.
        pinned = [part for d in devices for part in d.split("+")] if all(devices) else []
        metadata["annotations"] = spec.gpu_share.pod_annotations(pinned)
    return {"metadata": metadata, "spec": _pod_spec(spec, hosts)}


def _pod_spec(spec: VolcanoJobSpec, hosts: Sequence[str] = ()) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never" if spec.kind == "training" else "OnFailure",
        "activeDeadlineSeconds": spec.max_runtime_seconds,
        "terminationGracePeriodSeconds": spec.termination_grace_seconds,
        "automountServiceAccountToken": spec.automount_service_account_token,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": _pod_security_context(spec),
        "containers": [_container(spec)],
    }
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    label_in = dict(spec.node_label_in)
    if hosts:
        label_in[HOSTNAME_LABEL] = sorted(set(hosts))
    if label_in:
        pod["affinity"] = _node_affinity(label_in)
    if spec.tolerations:
        pod["tolerations"] = [t.as_dict() for t in spec.tolerations]
    if spec.shm_mib:
        pod["volumes"] = [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_mib}Mi"}}
        ]
    return pod


def _node_affinity(label_in: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """A required node affinity, one ``In`` expression per label (all must hold)."""
    expressions = [
        {"key": key, "operator": "In", "values": sorted(values)}
        for key, values in sorted(label_in.items())
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _pod_security_context(spec: VolcanoJobSpec) -> dict[str, Any]:
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if spec.run_as_non_root:
        context["runAsNonRoot"] = True
    return context


def _container_security_context(spec: VolcanoJobSpec) -> dict[str, Any]:
    context: dict[str, Any] = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if spec.run_as_non_root:
        context["runAsNonRoot"] = True
    return context


def _container(spec: VolcanoJobSpec) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "env": _env(spec),
        "resources": _resources(spec),
        "securityContext": _container_security_context(spec),
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if spec.port is not None:
        container["ports"] = [
            {"name": INFERENCE_PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}
        ]
        if spec.kind == "inference":
            container["readinessProbe"] = _readiness_probe(spec)
    if spec.shm_mib:
        # A mount point in the container, not a temporary file on this machine.
        container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]  # noqa: S108
    return container


def _readiness_probe(spec: VolcanoJobSpec) -> dict[str, Any]:
    """Ready once the server answers on its named port: an HTTP GET of ``readiness_path`` (any
    2xx/3xx) or, without a path, a TCP connect. No ``initialDelaySeconds``: a model that loads
    for minutes is simply not ready yet, and the kubelet keeps probing every few seconds;
    readiness failures never restart the container (that is a liveness probe's job)."""
    action: dict[str, Any]
    if spec.readiness_path:
        action = {"httpGet": {"path": spec.readiness_path, "port": INFERENCE_PORT_NAME}}
    else:
        action = {"tcpSocket": {"port": INFERENCE_PORT_NAME}}
    return {
        **action,
        "periodSeconds": READINESS_PERIOD_SECONDS,
        "timeoutSeconds": 2,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def _env(spec: VolcanoJobSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": PORTAL_ENV_JOB_ID, "value": str(_job_uuid(spec.job_id))},
        {"name": PORTAL_ENV_ATTEMPT, "value": str(spec.attempt)},
    ]
    env.extend({"name": name, "value": value} for name, value in spec.env.items())
    env.extend(
        {"name": name, "valueFrom": ref.as_dict()} for name, ref in spec.env_from_secrets.items()
    )
    return env


def _resources(spec: VolcanoJobSpec) -> dict[str, dict[str, str | int]]:
    amounts: dict[str, str | int] = {
        "cpu": cpu_quantity(spec.cpu_millicores),
        "memory": memory_quantity(spec.memory_mib),
    }
    if spec.gpu_share is not None:
        amounts.update(spec.gpu_share.resources())
    else:
        amounts[spec.gpu_resource] = spec.gpus_per_replica
    return {"requests": dict(amounts), "limits": dict(amounts)}
