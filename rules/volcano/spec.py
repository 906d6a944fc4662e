"""The builder's input: one admitted portal job as a :class:`VolcanoJobSpec`, every field
checked on construction (with its tolerations and Secret references)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rules.jobspec import env_name_refusal
from rules.volcano.names import (
    HOSTNAME_LABEL,
    INT32_MAX,
    JOB_KINDS,
    MAX_GPUS_PER_REPLICA,
    MAX_REPLICAS,
    JobKind,
    _fail,
    _is_dns_label,
    _is_dns_subdomain,
    _is_label_value,
    _is_qualified_key,
    cpu_quantity,
    memory_quantity,
    readiness_path_check,
    volcano_job_name,
)
from rules.volcano.sharing import (
    _DEVICE_ID,
    GpuShare,
    _validate_share,
)

# --- The input --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """A pod toleration, e.g. for a cluster that taints its GPU nodes ``nvidia.com/gpu``."""

    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.key and not _is_qualified_key(self.key):
            raise _fail("tolerations.key", f"not a valid label key: {self.key!r}")
        if self.operator not in ("Exists", "Equal"):
            raise _fail("tolerations.operator", f"must be Exists or Equal, got {self.operator!r}")
        if self.operator == "Exists" and self.value:
            raise _fail("tolerations.value", "must be empty when the operator is Exists")
        if not self.key and self.operator != "Exists":
            raise _fail("tolerations.key", "an empty key needs the operator Exists")
        if self.value is not None and not _is_label_value(self.value):
            raise _fail("tolerations.value", f"not a valid label value: {self.value!r}")
        if self.effect not in (None, "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise _fail("tolerations.effect", f"unknown effect {self.effect!r}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise _fail("tolerations.toleration_seconds", "only applies to the NoExecute effect")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


# A Secret's data key: what the API server accepts (apimachinery's IsConfigMapKey).
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True, kw_only=True)
class SecretKeyRef:
    """One key of a Kubernetes Secret in the job's namespace, read by the kubelet into an
    environment variable (``valueFrom.secretKeyRef``): the value never passes the portal."""

    secret: str
    key: str

    def __post_init__(self) -> None:
        if not _is_dns_subdomain(self.secret):
            raise _fail("env_from_secrets", f"{self.secret!r} is not a valid Secret name")
        if (
            len(self.key) > 253
            or _SECRET_KEY.fullmatch(self.key) is None
            or self.key.startswith("..")
            or self.key == "."
        ):
            raise _fail("env_from_secrets", f"{self.key!r} is not a valid Secret key")

    def as_dict(self) -> dict[str, Any]:
        return {"secretKeyRef": {"name": self.secret, "key": self.key}}


@dataclass(frozen=True, kw_only=True)
class VolcanoJobSpec:
    """Everything the builder needs to turn one admitted portal job into a Volcano Job.

    The caller has resolved it all: the cluster's namespace, queue, scheduler and labels, the
    GPU model's resource and node selector, the job's resources and limits. Construction
    validates every field and raises :class:`ManifestError` naming the one that is wrong, so
    a spec that exists can always be built.
    """

    job_id: str
    """The portal job's UUID; the Volcano Job's name is derived from it."""
    display_name: str
    team_slug: str
    namespace: str
    queue: str
    kind: JobKind
    image: str
    command: Sequence[str] = ()
    """Overrides the image's entrypoint; empty keeps it."""
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Kept in order, so a value may refer to an earlier one as ``$(NAME)``."""
    env_from_secrets: Mapping[str, SecretKeyRef] = field(default_factory=dict)
    """Variables the kubelet fills from Secrets in the job's namespace, after ``env``."""
    replicas: int = 1
    gpus_per_replica: int = 1
    gpu_resource: str = "nvidia.com/gpu"
    """``nvidia.com/gpu``, a MIG resource such as ``nvidia.com/mig-1g.10gb``, ``amd.com/gpu``."""
    gpu_model: str
    """The catalog key of the GPU model, for the ``gpupool.dev/gpu-model`` label."""
    node_selector: Mapping[str, str]
    """The model's node label, e.g. ``{"gpu-type": "a100-80gb"}`` or GFD's product label."""
    node_label_in: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Labels that may take any of several values (a required node affinity, ``In``): the
    same product spelled two ways across a driver upgrade. Either this or ``node_selector``
    must name the model's nodes."""
    replica_hosts: Sequence[str] = ()
    """The hostname planned for each replica, in replica order (empty: not pinned). Each task
    may run only on its own replicas' hosts, so a gang lands where the scheduler reserved its
    GPUs; a task of several replicas gets the set of their hosts."""
    replica_devices: Sequence[str] = ()
    """For a share: the device planned for each replica, in replica order (its UUID, several
    joined by ``+``; empty: not pinned). Each task's pods may take only its replicas' devices
    (HAMi's ``nvidia.com/use-gpuuuid``, Volcano vGPU's ``volcano.sh/vgpu-use-gpuuuid``), so a
    share lands on the device the portal booked; a task with a replica of unknown device is
    left to the cluster's scheduler."""
    cpu_millicores: int
    memory_mib: int
    max_runtime_seconds: int
    port: int | None = None
    """Container port of an inference server (or a training job's side port)."""
    readiness_path: str | None = None
    """An inference server's readiness probe: ``GET`` this path on ``port`` (``None``: a TCP
    probe, ready once the port accepts connections). Ignored without a port."""
    scheduler_name: str = "volcano"
    submission_uid: str
    """Unique per dispatch attempt lineage; a 409 with another value is a conflict."""
    portal_url: str
    priority_class_name: str | None = None
    max_retry: int = 3
    ttl_seconds_after_finished: int | None = 3 * 24 * 3600
    """Pods (and their logs) are garbage-collected this long after the job ends."""
    tolerations: Sequence[Toleration] = ()
    automount_service_account_token: bool = False
    run_as_non_root: bool = False
    shm_mib: int = 0
    """Size of a memory-backed ``/dev/shm`` (NCCL, DataLoader workers); 0 for none."""
    termination_grace_seconds: int = 30
    """Each pod's ``terminationGracePeriodSeconds``: a stopped (preempted, cancelled) pod gets
    SIGTERM, then this long to checkpoint before SIGKILL (the team's policy)."""
    gpu_share: GpuShare | None = None
    """A shared (fractional) GPU per replica instead of ``gpus_per_replica`` devices of
    ``gpu_resource``; HAMi mode also sets the scheduler to ``hami-scheduler``."""
    attempt: int = 1
    """Which run of the job this is (1 for the first admission, one more per requeue): it
    names the Volcano Job (see :func:`volcano_job_name`) and reaches the container as
    ``GPUPOOL_ATTEMPT``."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def job_name(self) -> str:
        return volcano_job_name(self.job_id, self.attempt)


def _check_env_name(field_name: str, key: object) -> None:
    """The job request's env-name rule (``rules.jobspec``), the one submit applies."""
    refusal = env_name_refusal(key)
    if refusal is not None:
        raise _fail(field_name, refusal)


def _validate(spec: VolcanoJobSpec) -> None:
    """One flat check per field, in field order."""
    volcano_job_name(spec.job_id, spec.attempt)
    if spec.kind not in JOB_KINDS:
        raise _fail("kind", f"must be training or inference, got {spec.kind!r}")
    if len(spec.display_name) > 1024:
        raise _fail("display_name", "must be at most 1024 characters")
    if not spec.team_slug:
        raise _fail("team_slug", "must not be empty")
    if not _is_dns_label(spec.namespace):
        raise _fail("namespace", f"must be a DNS-1123 label, got {spec.namespace!r}")
    if not _is_dns_subdomain(spec.queue) or spec.queue == "root":
        raise _fail("queue", f"must be a DNS-1123 subdomain other than root, got {spec.queue!r}")
    if not spec.image or spec.image != spec.image.strip() or any(c.isspace() for c in spec.image):
        raise _fail("image", f"must be a non-empty image reference without spaces: {spec.image!r}")
    for name, values in (("command", spec.command), ("args", spec.args)):
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise _fail(name, "must be a list of strings")
    for key, value in spec.env.items():
        _check_env_name("env", key)
        if not isinstance(value, str):
            raise _fail("env", f"the value of {key} must be a string")
    for key, ref in spec.env_from_secrets.items():
        _check_env_name("env_from_secrets", key)
        if key in spec.env:
            raise _fail("env_from_secrets", f"{key} is also set in env")
        if not isinstance(ref, SecretKeyRef):
            raise _fail("env_from_secrets", f"the value of {key} must be a SecretKeyRef")
    if not 1 <= spec.replicas <= MAX_REPLICAS:
        raise _fail("replicas", f"must be between 1 and {MAX_REPLICAS}, got {spec.replicas}")
    _validate_share(spec.gpu_share)
    if spec.gpu_share is None and not 1 <= spec.gpus_per_replica <= MAX_GPUS_PER_REPLICA:
        raise _fail(
            "gpus_per_replica",
            f"must be between 1 and {MAX_GPUS_PER_REPLICA}, got {spec.gpus_per_replica}",
        )
    resource_domain = spec.gpu_resource.partition("/")[0]
    if (
        not _is_qualified_key(spec.gpu_resource, require_prefix=True)
        or resource_domain.endswith("kubernetes.io")
        or resource_domain.endswith("k8s.io")
    ):
        raise _fail("gpu_resource", f"must be an extended resource name, got {spec.gpu_resource!r}")
    if not spec.gpu_model:
        raise _fail("gpu_model", "must not be empty")
    if not spec.node_selector and not spec.node_label_in:
        raise _fail("node_selector", "must name the GPU model's node label")
    for key, value in spec.node_selector.items():
        _check_node_label("node_selector", key, value)
    for key, values in spec.node_label_in.items():
        if not values or isinstance(values, str):
            raise _fail("node_label_in", f"{key!r} needs a list of one or more values")
        for value in values:
            _check_node_label("node_label_in", key, value)
    if spec.replica_hosts:
        if isinstance(spec.replica_hosts, str) or len(spec.replica_hosts) != spec.replicas:
            raise _fail("replica_hosts", f"needs one hostname per replica ({spec.replicas})")
        for host in spec.replica_hosts:
            _check_node_label("replica_hosts", HOSTNAME_LABEL, host)
    if spec.replica_devices:
        if spec.gpu_share is None:
            raise _fail("replica_devices", "pins the devices of a shared GPU only")
        if isinstance(spec.replica_devices, str) or len(spec.replica_devices) != spec.replicas:
            raise _fail("replica_devices", f"needs one device per replica ({spec.replicas})")
        for device in spec.replica_devices:
            for part in device.split("+") if device else ():
                if _DEVICE_ID.fullmatch(part) is None:
                    raise _fail("replica_devices", f"{part!r} is not a device UUID")
    cpu_quantity(spec.cpu_millicores)
    memory_quantity(spec.memory_mib)
    if not 1 <= spec.max_runtime_seconds <= INT32_MAX:
        raise _fail(
            "max_runtime_seconds", f"must be a positive number, got {spec.max_runtime_seconds}"
        )
    if spec.port is not None and not 1 <= spec.port <= 65535:
        raise _fail("port", f"must be between 1 and 65535, got {spec.port}")
    if spec.readiness_path is not None:
        readiness_path_check(spec.readiness_path)
    if not spec.scheduler_name or len(spec.scheduler_name) > 63:
        raise _fail("scheduler_name", "must be 1 to 63 characters")
    if not spec.submission_uid or len(spec.submission_uid) > 253:
        raise _fail("submission_uid", "must be 1 to 253 characters")
    if not spec.portal_url.startswith(("https://", "http://")):
        raise _fail("portal_url", f"must be an http(s) URL, got {spec.portal_url!r}")
    if spec.priority_class_name is not None and not _is_dns_subdomain(spec.priority_class_name):
        raise _fail(
            "priority_class_name", f"must be a DNS-1123 subdomain: {spec.priority_class_name!r}"
        )
    if not 0 <= spec.max_retry <= INT32_MAX:
        raise _fail("max_retry", f"must not be negative, got {spec.max_retry}")
    ttl = spec.ttl_seconds_after_finished
    if ttl is not None and not 0 <= ttl <= INT32_MAX:
        raise _fail("ttl_seconds_after_finished", f"must not be negative, got {ttl}")
    if not all(isinstance(t, Toleration) for t in spec.tolerations):
        raise _fail("tolerations", "must be Toleration objects")
    if not 0 <= spec.termination_grace_seconds <= INT32_MAX:
        raise _fail(
            "termination_grace_seconds",
            f"must be 0 to {INT32_MAX} seconds, got {spec.termination_grace_seconds}",
        )
    if spec.shm_mib < 0:
        raise _fail("shm_mib", f"must not be negative, got {spec.shm_mib}")
    if spec.shm_mib > spec.memory_mib:
        raise _fail("shm_mib", "counts against the memory limit, so it cannot exceed memory_mib")


def _check_node_label(field_name: str, key: str, value: str) -> None:
    if not _is_qualified_key(key):
        raise _fail(field_name, f"{key!r} is not a valid label key")
    if not _is_label_value(value):
        raise _fail(field_name, f"{value!r} is not a valid label value for {key}")
