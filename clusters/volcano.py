"""The Volcano manifest builder: portal jobs and team queues as plain Kubernetes objects.

This module is pure: it imports the standard library only (an import-linter contract keeps
Django, Celery and ``kubernetes`` out) and never speaks to a cluster. The kube adapter turns
its dictionaries into API calls; tests validate them against the Volcano CRD schemas in
``../shared/k8s-reference/crds/``.

A portal job becomes one ``batch.volcano.sh/v1alpha1`` Job. The decisions below are where
the issue left room; each is a constant or a small helper so it can be changed in one place.

Naming
    The Volcano Job is named ``gp-`` + the 32 hex digits of the portal job's UUID
    (:func:`volcano_job_name`). The full UUID costs nothing (the longest pod name, at 4096
    replicas, is 47 characters, well inside Volcano's rule
    ``len(job) + len(task) + digits + 2 <= 63``) and makes a name collision impossible, so a
    ``409 AlreadyExists`` always means "this job, dispatched before". The ``gp-`` prefix makes
    the name start with a letter, which the ``svc`` plugin's Service (a DNS-1035 label) needs.

Tasks
    Training uses Volcano's ``pytorch`` plugin convention for every replica count: a task
    ``master`` with one replica, plus a task ``worker`` with ``replicas - 1`` when there is more
    than one. The plugin then gives every pod ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``
    and ``RANK`` (master 0, worker i is rank i + 1), so the same ``torchrun`` command works for
    one replica and for 64. Portal replica ``r`` is pod ``<job>-master-0`` for ``r == 0`` and
    ``<job>-worker-<r-1>`` otherwise (:func:`replica_pod_name`). Inference is one task
    ``server`` whose replicas are independent.

Restarts
    Training pods run with ``restartPolicy: Never``: a rank restarted in place by the kubelet
    cannot rejoin a collective, so restarts are Volcano's, for the whole gang. Policies:
    ``PodEvicted -> RestartJob`` (node drain, preemption by Volcano; bounded by ``maxRetry``)
    and ``PodFailed -> TerminateJob``. The issue asked for ``AbortJob`` on ``PodFailed``; we
    use ``TerminateJob`` instead because ``Aborted`` is a resumable, non-terminal phase that
    ``ttlSecondsAfterFinished`` never collects, while ``Terminated`` is terminal. Both keep
    the failed pods (Volcano's "soft" retain), so logs and exit codes stay readable.
    Inference pods run with ``restartPolicy: OnFailure``: a crashed server restarts in place
    and keeps its GPUs, a clean exit completes. ``PodEvicted -> RestartPod`` recreates only
    the evicted replica; ``PodFailed`` (which, under OnFailure, means the runtime limit or a
    node-level failure) terminates the job, so a deadline can never be escaped by a restart.
    No ``TaskCompleted -> CompleteJob`` on the master: it would kill workers still writing
    their last checkpoint; the job completes when every pod has succeeded.

Gang
    ``minAvailable`` is the replica count for both kinds, matching the portal's admission,
    which reserved capacity for all replicas at once. Each task's ``minAvailable`` is its
    replica count.

Resources
    cpu, memory and the GPU resource are set in both ``requests`` and ``limits`` with equal
    values (Guaranteed QoS: last to be evicted under memory pressure, exclusive cores under
    the static CPU manager). The GPU is set in ``requests`` too, not only in ``limits``,
    because Volcano computes the PodGroup's ``minResources`` from the template's requests
    before the API server's defaulting would copy limits into them.

Runtime limit
    ``max_runtime_seconds`` becomes each pod's ``activeDeadlineSeconds``. It counts from pod
    start, so a ``RestartJob`` gives the new pods a fresh deadline; the portal enforces the
    job's total wall-clock limit itself (``clusters.deadlines``). ``max_retry`` is the job's
    own retry budget.

Pod security
    Every pod meets the Pod Security Standard "restricted" profile except ``runAsNonRoot``:
    no privileged containers, ``allowPrivilegeEscalation: false``, every capability dropped,
    seccomp ``RuntimeDefault``, no host namespaces, no host paths (the only volume is an
    optional memory-backed ``/dev/shm``), no service account token unless the cluster is
    configured for it, and no service-link environment variables (with one headless Service
    per job, a busy namespace would otherwise inject thousands of variables). Most GPU images
    (PyTorch, NGC) run as root, and ``runAsNonRoot: true`` makes the kubelet refuse them, so
    it is opt-in per cluster (``run_as_non_root``). Root without capabilities and without
    privilege escalation is the compromise.

Networking
    The ``svc`` plugin gives the pods stable DNS names and a NetworkPolicy admitting ingress
    only from the job's own pods. Training keeps that policy. Inference passes
    ``--disable-network-policy``, since a server the policy isolates cannot serve anyone.

Serving
    An inference container with a port declares it (named ``http``) and gets a readiness probe
    on it: an HTTP GET of the job's readiness path, or a TCP connect without one. Its Service is
    ``<job>-serve`` (:func:`build_serving_service`; the ``svc`` plugin's headless Service owns
    the job's own name), selecting the job's pods by Volcano's ``volcano.sh/job-name`` and the
    portal's job label, and on an ingress cluster an Ingress on the host the admin's pattern
    gives (:func:`build_serving_ingress`). Both carry an owner reference to the Volcano Job.

Queues
    One cluster-scoped ``scheduling.volcano.sh/v1beta1`` Queue per team and cluster
    (:func:`build_volcano_queue`). A queue's state is not a spec field: it lives in
    ``status.state``, which the API server drops on create and on writes to the main
    resource. A new queue starts Open; it is closed and reopened by a ``bus.volcano.sh``
    Command (:func:`build_queue_command`), which is what ``vcctl queue operate`` does.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "ANNOTATION_DISPLAY_NAME",
    "ANNOTATION_PORTAL_URL",
    "ANNOTATION_SUBMISSION_UID",
    "COMMAND_API_VERSION",
    "COMMAND_KIND",
    "CONTAINER_NAME",
    "EXPOSURES",
    "EXPOSURE_CLUSTERIP",
    "EXPOSURE_INGRESS",
    "HAMI_USE_UUID",
    "JOB_API_VERSION",
    "JOB_KIND",
    "LABEL_ATTEMPT",
    "LABEL_GPU_MODEL",
    "LABEL_JOB_ID",
    "LABEL_KIND",
    "LABEL_MANAGED_BY",
    "LABEL_TEAM",
    "MANAGED_BY",
    "MAX_GPUS_PER_REPLICA",
    "MAX_REPLICAS",
    "PORTAL_ENV_ATTEMPT",
    "PORTAL_ENV_JOB_ID",
    "PYTORCH_PORT",
    "QUEUE_API_VERSION",
    "QUEUE_KIND",
    "SHARING_HAMI",
    "SHARING_VOLCANO_VGPU",
    "TASK_MASTER",
    "TASK_SERVER",
    "TASK_WORKER",
    "VGPU_USE_UUID",
    "VOLCANO_LABEL_JOB_NAME",
    "VOLCANO_LABEL_TASK_INDEX",
    "VOLCANO_LABEL_TASK_SPEC",
    "GpuShare",
    "JobKind",
    "ManifestError",
    "QueueAction",
    "SecretKeyRef",
    "ServingSpec",
    "Toleration",
    "VolcanoJobSpec",
    "attempt_of",
    "build_queue_command",
    "build_serving_ingress",
    "build_serving_service",
    "build_volcano_job",
    "build_volcano_queue",
    "cpu_quantity",
    "ingress_host",
    "ingress_host_pattern_check",
    "job_run_name",
    "job_selector",
    "label_value",
    "managed_selector",
    "memory_quantity",
    "pod_name",
    "pod_of_replica",
    "readiness_path_check",
    "replica_of_pod",
    "replica_pod_name",
    "run_job_name",
    "serving_service_name",
    "serving_url",
    "team_namespace_name",
    "volcano_job_name",
    "volcano_queue_name",
]

# --- API identities -----------------------------------------------------------------------

JOB_API_VERSION: Final = "batch.volcano.sh/v1alpha1"
JOB_KIND: Final = "Job"
QUEUE_API_VERSION: Final = "scheduling.volcano.sh/v1beta1"
QUEUE_KIND: Final = "Queue"
COMMAND_API_VERSION: Final = "bus.volcano.sh/v1alpha1"
COMMAND_KIND: Final = "Command"

# --- Labels and annotations the adapter selects and compares on -----------------------------

LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "gpupool"
LABEL_TEAM: Final = "gpupool.dev/team"
LABEL_JOB_ID: Final = "gpupool.dev/job-id"
LABEL_GPU_MODEL: Final = "gpupool.dev/gpu-model"
LABEL_KIND: Final = "gpupool.dev/kind"
LABEL_ATTEMPT: Final = "gpupool.dev/attempt"
ANNOTATION_SUBMISSION_UID: Final = "gpupool.dev/submission-uid"
ANNOTATION_PORTAL_URL: Final = "gpupool.dev/portal-url"
ANNOTATION_DISPLAY_NAME: Final = "gpupool.dev/display-name"

# Labels Volcano's controller puts on every pod it creates.
VOLCANO_LABEL_JOB_NAME: Final = "volcano.sh/job-name"
VOLCANO_LABEL_TASK_SPEC: Final = "volcano.sh/task-spec"
VOLCANO_LABEL_TASK_INDEX: Final = "volcano.sh/task-index"

# --- Shape of a job ---------------------------------------------------------------------------

JobKind = Literal["training", "inference"]
JOB_KINDS: Final[frozenset[str]] = frozenset({"training", "inference"})

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
TASK_MASTER: Final = "master"
TASK_WORKER: Final = "worker"
TASK_SERVER: Final = "server"
CONTAINER_NAME: Final = "main"
JOB_NAME_PREFIX: Final = "gp-"
PYTORCH_PORT: Final = 23456
INFERENCE_PORT_NAME: Final = "http"
SHM_VOLUME: Final = "dshm"
READINESS_PERIOD_SECONDS: Final = 5
MAX_READINESS_PATH: Final = 1024

# A sanity bound, far below what pod names allow (see ``volcano_job_name``).
MAX_REPLICAS: Final = 4096
# Runs of one job: requeues after node failures are not bounded by the user's limits.
MAX_ATTEMPT: Final = 99_999
MAX_GPUS_PER_REPLICA: Final = 64
INT32_MAX: Final = 2**31 - 1

# Environment the portal or Volcano's plugins set; a user value would be shadowed or would
# shadow theirs, so it is refused rather than silently lost.
PORTAL_ENV_JOB_ID: Final = "GPUPOOL_JOB_ID"
PORTAL_ENV_ATTEMPT: Final = "GPUPOOL_ATTEMPT"
RESERVED_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
)
RESERVED_ENV_PREFIXES: Final[tuple[str, ...]] = ("GPUPOOL_", "VC_", "VK_")

# Policies, per kind (see the module docstring). Events never repeat within one list.
_TRAINING_POLICIES: Final[tuple[tuple[str, str], ...]] = (
    ("PodEvicted", "RestartJob"),
    ("PodFailed", "TerminateJob"),
)
_INFERENCE_POLICIES: Final[tuple[tuple[str, str], ...]] = (
    ("PodEvicted", "RestartPod"),
    ("PodFailed", "TerminateJob"),
)

# --- Validation patterns (Kubernetes apimachinery's, as regular expressions) ----------------

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


class ManifestError(ValueError):
    """A job or queue cannot be expressed as a valid Volcano object; the message names the field."""


def _fail(field_name: str, problem: str) -> ManifestError:
    return ManifestError(f"{field_name}: {problem}")


def _is_dns_label(value: str) -> bool:
    return len(value) <= 63 and _DNS1123_LABEL.fullmatch(value) is not None


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def _is_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def _is_qualified_key(value: str, *, require_prefix: bool = False) -> bool:
    """A label key or resource name: ``[prefix/]name`` with a DNS subdomain prefix."""
    prefix, slash, name = value.rpartition("/")
    if require_prefix and not slash:
        return False
    if slash and not _is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


_READINESS_PATH = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*")


def readiness_path_check(path: str) -> str:
    """``path`` if it can be an HTTP readiness probe's path: absolute, printable ASCII without
    spaces or fragments, at most 1024 characters; else :class:`ManifestError` naming the field.
    Shared by the portal's job validation, so a bad path is a 400 and never a refused pod."""
    if not isinstance(path, str) or len(path) > MAX_READINESS_PATH:
        raise _fail("readiness_path", f"must be at most {MAX_READINESS_PATH} characters")
    if _READINESS_PATH.fullmatch(path) is None:
        raise _fail(
            "readiness_path",
            f"must be an absolute URL path such as /health (no spaces or #), got {path!r}",
        )
    return path


def _short_hash(value: str, length: int = 8) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:length]


# --- Names ------------------------------------------------------------------------------------


def _job_uuid(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except (ValueError, AttributeError, TypeError):
        raise _fail("job_id", f"must be a UUID, got {job_id!r}") from None


def volcano_job_name(job_id: str, attempt: int = 1) -> str:
    """The Volcano Job's name for one attempt (run) of a portal job: ``gp-`` and the UUID's 32
    hex digits, then ``-a<n>`` from the second attempt on.

    Deterministic per attempt, so a retried create hits ``409 AlreadyExists`` instead of making
    a twin. A new name per attempt, because Volcano names pods ``<job>-<task>-<index>``: the
    pods of a run stopped on a node that died stay Terminating (no kubelet confirms their end)
    and would keep the next run's pods from being created under the same names. At 35
    characters (42 at attempt 99,999) it leaves 21 for ``-<task>-<index>`` in pod names (63 at
    most).
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPT:
        raise _fail("attempt", f"must be between 1 and {MAX_ATTEMPT}, got {attempt!r}")
    base = f"{JOB_NAME_PREFIX}{_job_uuid(job_id).hex}"
    return base if attempt == 1 else f"{base}-a{attempt}"


def attempt_of(labels: Mapping[str, Any]) -> int | None:
    """The attempt a portal object belongs to, from its ``gpupool.dev/attempt`` label; None
    for an object made before the label existed (or by hand), which may be any attempt's."""
    value = str(labels.get(LABEL_ATTEMPT) or "")
    return int(value) if value.isascii() and value.isdigit() else None


def pod_name(job_name: str, task: str, index: int) -> str:
    """The name Volcano gives a task's pod: ``<job>-<task>-<index>``."""
    return f"{job_name}-{task}-{index}"


def _task_layout(kind: str, replicas: int) -> tuple[tuple[str, int], ...]:
    """(task name, replicas) in the order the tasks appear in the manifest."""
    if kind == "inference":
        return ((TASK_SERVER, replicas),)
    if replicas == 1:
        return ((TASK_MASTER, 1),)
    return ((TASK_MASTER, 1), (TASK_WORKER, replicas - 1))


def replica_pod_name(
    job_id: str, kind: JobKind, replicas: int, replica: int, attempt: int = 1
) -> str:
    """The pod that runs portal replica ``replica`` (0-based) of a job's attempt; for logs."""
    return pod_of_replica(volcano_job_name(job_id, attempt), kind, replicas, replica)


def run_job_name(job_id: str, attempt: int, created: str = "") -> str:
    """The Volcano Job of a job's current run: the name it was ``created`` under when known
    (a run created before per-run names kept the first run's), else the run's own name."""
    return created or volcano_job_name(job_id, attempt)


def job_run_name(job: Any) -> str:
    """:func:`run_job_name` of a job row (``public_id``, ``attempt_number``,
    ``volcano_job_name``): where its current run's pods are, for logs."""
    return run_job_name(str(job.public_id), job.attempt_number, job.volcano_job_name)


def pod_of_replica(job_name: str, kind: JobKind, replicas: int, replica: int) -> str:
    """The pod that runs portal replica ``replica`` (0-based) in Volcano Job ``job_name``."""
    if not 0 <= replica < replicas:
        raise _fail("replica", f"must be between 0 and {replicas - 1}, got {replica}")
    if kind == "inference":
        return pod_name(job_name, TASK_SERVER, replica)
    if replica == 0:
        return pod_name(job_name, TASK_MASTER, 0)
    return pod_name(job_name, TASK_WORKER, replica - 1)


def replica_of_pod(task: str, index: int) -> int | None:
    """The portal replica a pod runs, from its ``volcano.sh/task-spec`` and ``task-index``.

    None for a task this builder never creates.
    """
    if task in (TASK_SERVER, TASK_MASTER):
        return index
    if task == TASK_WORKER:
        return index + 1
    return None


def label_value(value: str) -> str:
    """``value`` as a valid label value, unchanged when it already is one.

    Anything else is reduced to the allowed characters and given a hash of the original, so
    two different inputs never share a label (and a selector never matches the wrong team).
    """
    if _is_label_value(value):
        return value
    cleaned = _LABEL_UNSAFE.sub("-", value).strip("-_.")[:54].rstrip("-_.")
    suffix = _short_hash(value)
    return f"{cleaned}-{suffix}" if cleaned else suffix


def _dns_name(prefix: str, slug: str, max_length: int) -> str:
    """``prefix + slug`` as a DNS-1123 label; hashed when the slug had to be changed."""
    candidate = prefix + slug
    if _is_dns_label(candidate) and len(candidate) <= max_length:
        return candidate
    cleaned = _NAME_UNSAFE.sub("-", slug.lower()).strip("-")
    room = max_length - len(prefix) - 9
    cleaned = cleaned[:room].rstrip("-")
    tail = _short_hash(slug)
    return f"{prefix}{cleaned}-{tail}" if cleaned else f"{prefix}{tail}"


def volcano_queue_name(team_slug: str) -> str:
    """The Volcano Queue for a team: ``gp-<slug>``, never ``root`` or ``default``."""
    if not team_slug:
        raise _fail("team_slug", "must not be empty")
    return _dns_name(JOB_NAME_PREFIX, team_slug, 63)


def team_namespace_name(team_slug: str) -> str:
    """The job namespace of a team on a cluster that uses one namespace per team."""
    if not team_slug:
        raise _fail("team_slug", "must not be empty")
    return _dns_name(JOB_NAME_PREFIX, team_slug, 63)


def managed_selector() -> str:
    """Label selector for everything the portal created on a cluster."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def job_selector(job_id: str) -> str:
    """Label selector for one portal job's Volcano Job and pods."""
    return f"{managed_selector()},{LABEL_JOB_ID}={_job_uuid(job_id)}"


# --- Quantities -------------------------------------------------------------------------------


def cpu_quantity(millicores: int) -> str:
    """Millicores as a Kubernetes quantity: 4000 -> ``"4"``, 500 -> ``"500m"``."""
    if millicores < 1:
        raise _fail("cpu_millicores", f"must be at least 1, got {millicores}")
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def memory_quantity(mib: int) -> str:
    """MiB as a Kubernetes quantity: 16384 -> ``"16Gi"``, 1536 -> ``"1536Mi"``."""
    if mib < 1:
        raise _fail("memory_mib", f"must be at least 1, got {mib}")
    if mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


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


SHARING_VOLCANO_VGPU: Final = "volcano-vgpu"
SHARING_HAMI: Final = "hami"
HAMI_SCHEDULER: Final = "hami-scheduler"
"""HAMi's scheduler extender: its webhook points shared-GPU pods at it, and so does the builder."""
VGPU_NUMBER: Final = "volcano.sh/vgpu-number"
VGPU_MEMORY: Final = "volcano.sh/vgpu-memory"
VGPU_CORES: Final = "volcano.sh/vgpu-cores"
HAMI_GPU: Final = "nvidia.com/gpu"
HAMI_MEMORY: Final = "nvidia.com/gpumem"
HAMI_CORES: Final = "nvidia.com/gpucores"
HAMI_GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
VGPU_MODE: Final = "volcano.sh/vgpu-mode"
HAMI_USE_UUID: Final = "nvidia.com/use-gpuuuid"
"""The devices (UUIDs, comma-separated) HAMi's scheduler may give the pod, and no other."""
VGPU_USE_UUID: Final = "volcano.sh/vgpu-use-gpuuuid"
"""The same for Volcano's deviceshare plugin (``how_to_use_volcano_vgpu.md``)."""
_DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, kw_only=True)
class GpuShare:
    """A fraction of one GPU per replica, in the words of the cluster's sharing mode.

    ``volcano-vgpu``: one ``volcano.sh/vgpu-number`` with ``vgpu-memory`` MiB (and
    ``vgpu-cores`` %), scheduled by Volcano's deviceshare plugin. ``hami``: one
    ``nvidia.com/gpu`` with ``nvidia.com/gpumem`` MiB (and ``gpucores`` %), scheduled by
    ``hami-scheduler``, packed onto the fullest device that fits (``binpack``) so whole devices
    stay free for larger shares.
    """

    mode: str
    memory_mib: int
    cores_percent: int | None = None

    def resources(self) -> dict[str, int]:
        vgpu = self.mode == SHARING_VOLCANO_VGPU
        amounts = {
            VGPU_NUMBER if vgpu else HAMI_GPU: 1,
            VGPU_MEMORY if vgpu else HAMI_MEMORY: self.memory_mib,
        }
        if self.cores_percent is not None:
            amounts[VGPU_CORES if vgpu else HAMI_CORES] = self.cores_percent
        return amounts

    def pod_annotations(self, devices: Sequence[str] = ()) -> dict[str, str]:
        """The pod's annotations; ``devices``: the UUIDs its replicas were planned on, which
        pins the pod to them (a task of several replicas may take any of its replicas')."""
        if self.mode == SHARING_VOLCANO_VGPU:
            out = {VGPU_MODE: "hami-core"}
        else:
            out = {HAMI_GPU_POLICY: "binpack"}
        if devices:
            out[VGPU_USE_UUID if self.mode == SHARING_VOLCANO_VGPU else HAMI_USE_UUID] = ",".join(
                sorted(set(devices))
            )
        return out


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
    if not isinstance(key, str) or _C_IDENTIFIER.fullmatch(key) is None:
        raise _fail(field_name, f"{key!r} is not a valid variable name")
    if key in RESERVED_ENV_NAMES or key.startswith(RESERVED_ENV_PREFIXES):
        raise _fail(field_name, f"{key} is set by the portal or Volcano and cannot be overridden")


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


def _validate_share(share: GpuShare | None) -> None:
    if share is None:
        return
    if share.mode not in (SHARING_VOLCANO_VGPU, SHARING_HAMI):
        raise _fail("gpu_share", f"mode must be volcano-vgpu or hami, got {share.mode!r}")
    if not 1 <= share.memory_mib <= INT32_MAX:
        raise _fail("gpu_share", f"memory_mib must be a positive number, got {share.memory_mib}")
    if share.cores_percent is not None and not 1 <= share.cores_percent <= 100:
        raise _fail("gpu_share", f"cores_percent must be 1 to 100, got {share.cores_percent}")


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


def _check_node_label(field_name: str, key: str, value: str) -> None:
    if not _is_qualified_key(key):
        raise _fail(field_name, f"{key!r} is not a valid label key")
    if not _is_label_value(value):
        raise _fail(field_name, f"{value!r} is not a valid label value for {key}")


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


# --- Queues -----------------------------------------------------------------------------------

QueueAction = Literal["OpenQueue", "CloseQueue"]


def build_volcano_queue(
    name: str,
    weight: int,
    capability: Mapping[str, str | int],
    *,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A team's cluster-scoped Volcano Queue, for server-side apply.

    ``weight`` is the team's fair-share weight (1..65535, Volcano's proportion plugin);
    ``capability`` its hard limit, e.g. ``{"nvidia.com/gpu": 8}`` (quota plus borrowing).
    ``reclaimable`` is set so other teams may take back what this team borrowed.
    State is not part of the object: see :func:`build_queue_command`.
    """
    if not _is_dns_subdomain(name) or name in ("root", "default"):
        raise _fail("queue name", f"must be a DNS-1123 subdomain other than root/default: {name!r}")
    if isinstance(weight, bool) or not 1 <= weight <= 65535:
        raise _fail("weight", f"must be between 1 and 65535, got {weight}")
    resources: dict[str, str | int] = {}
    for resource, amount in capability.items():
        if not _is_qualified_key(resource):
            raise _fail("capability", f"{resource!r} is not a resource name")
        if isinstance(amount, bool) or (isinstance(amount, int) and amount < 0):
            raise _fail("capability", f"{resource} must be a non-negative quantity, got {amount!r}")
        if isinstance(amount, str) and _QUANTITY.fullmatch(amount) is None:
            raise _fail("capability", f"{resource} must be a quantity, got {amount!r}")
        resources[resource] = amount
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, **(labels or {})},
    }
    return {
        "apiVersion": QUEUE_API_VERSION,
        "kind": QUEUE_KIND,
        "metadata": metadata,
        "spec": {"weight": weight, "capability": resources, "reclaimable": True},
    }


# Non-negative quantities only (the CRD's pattern also admits a sign).
_QUANTITY = re.compile(
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)


def build_queue_command(
    *, queue_name: str, queue_uid: str, action: QueueAction, namespace: str, name: str
) -> dict[str, Any]:
    """A ``bus.volcano.sh/v1alpha1`` Command that opens or closes a queue.

    Volcano's queue controller picks up Commands whose target is a Queue, applies the action
    to ``status.state`` and deletes the Command. ``queue_uid`` is the live queue's
    ``metadata.uid`` (an owner reference needs it); ``name`` should be unique per request,
    e.g. ``<queue>-close-<short random>``.
    """
    if action not in ("OpenQueue", "CloseQueue"):
        raise _fail("action", f"must be OpenQueue or CloseQueue, got {action!r}")
    if not _is_dns_subdomain(queue_name):
        raise _fail("queue_name", f"must be a DNS-1123 subdomain: {queue_name!r}")
    if not queue_uid:
        raise _fail("queue_uid", "must not be empty")
    if not _is_dns_label(namespace):
        raise _fail("namespace", f"must be a DNS-1123 label: {namespace!r}")
    if not _is_dns_subdomain(name):
        raise _fail("name", f"must be a DNS-1123 subdomain: {name!r}")
    return {
        "apiVersion": COMMAND_API_VERSION,
        "kind": COMMAND_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "action": action,
        "target": {
            "apiVersion": QUEUE_API_VERSION,
            "kind": QUEUE_KIND,
            "name": queue_name,
            "uid": queue_uid,
        },
    }


# --- Serving: the Service (and Ingress) in front of an inference job ---------------------------

SERVICE_API_VERSION: Final = "v1"
INGRESS_API_VERSION: Final = "networking.k8s.io/v1"
SERVING_SUFFIX: Final = "-serve"
EXPOSURE_CLUSTERIP: Final = "clusterip"
EXPOSURE_INGRESS: Final = "ingress"
EXPOSURES: Final[frozenset[str]] = frozenset({EXPOSURE_CLUSTERIP, EXPOSURE_INGRESS})
HOST_JOB: Final = "{job}"
HOST_TEAM: Final = "{team}"
_HOST_PLACEHOLDER = re.compile(r"\{[^}]*\}")


def serving_service_name(job_id: str) -> str:
    """The Service (and Ingress) of an inference job: the Volcano Job's name + ``-serve``.

    Not the Volcano Job's own name: the ``svc`` plugin already owns a headless Service by that
    name (pod DNS). 41 characters, a DNS-1035 label as a Service name must be."""
    return volcano_job_name(job_id) + SERVING_SUFFIX


def ingress_host_pattern_check(pattern: str) -> str:
    """``pattern`` if it can make an Ingress host for every job: it names ``{job}`` (one host
    per job, so two jobs never share a route), uses no placeholder but ``{job}`` and
    ``{team}``, and is a DNS-1123 subdomain once they are filled in. Else ManifestError."""
    if HOST_JOB not in pattern:
        raise _fail("ingress_host_pattern", "must contain {job}, so each job gets its own host")
    unknown = set(_HOST_PLACEHOLDER.findall(pattern)) - {HOST_JOB, HOST_TEAM}
    if unknown:
        raise _fail(
            "ingress_host_pattern",
            f"knows only {{job}} and {{team}}, not {', '.join(sorted(unknown))}",
        )
    sample = pattern.replace(HOST_JOB, "gp-" + "0" * 32).replace(HOST_TEAM, "gp-" + "t" * 20)
    if not _is_dns_subdomain(sample) or any(len(p) > 63 for p in sample.split(".")):
        raise _fail(
            "ingress_host_pattern",
            f"must give a lower-case DNS name such as {{job}}.serve.example.org, got {pattern!r}",
        )
    return pattern


def ingress_host(pattern: str, job_id: str, team_slug: str) -> str:
    """The host an inference job is reached at on an ingress cluster: the admin's pattern with
    ``{job}`` the Volcano Job's name and ``{team}`` the team as a DNS label."""
    ingress_host_pattern_check(pattern)
    team = _dns_name("", team_slug, 63) if team_slug else "team"
    return pattern.replace(HOST_JOB, volcano_job_name(job_id)).replace(HOST_TEAM, team)


@dataclass(frozen=True, kw_only=True)
class ServingSpec:
    """What the Service and Ingress of one inference job need.

    ``owner_uid`` is the Volcano Job's UID (from its create): with it both objects carry an
    owner reference, so the cluster's garbage collector removes them with the job even when
    the portal's own delete never arrives. ``host`` is set on an ingress cluster only.
    """

    job_id: str
    team_slug: str
    namespace: str
    port: int
    owner_uid: str | None = None
    host: str | None = None
    ingress_class_name: str | None = None
    volcano_name: str | None = None
    """The Volcano Job of the run whose pods the Service selects (and that owns it); None:
    the first run's. The Service's own name, and so the endpoint's address, stays the same
    across runs."""

    def __post_init__(self) -> None:
        volcano_job_name(self.job_id)
        if self.volcano_name is not None and not _is_dns_label(self.volcano_name):
            raise _fail("volcano_name", f"must be a DNS-1123 label, got {self.volcano_name!r}")
        if not _is_dns_label(self.namespace):
            raise _fail("namespace", f"must be a DNS-1123 label, got {self.namespace!r}")
        if isinstance(self.port, bool) or not 1 <= self.port <= 65535:
            raise _fail("port", f"must be between 1 and 65535, got {self.port}")
        if self.host is not None and not _is_dns_subdomain(self.host):
            raise _fail("host", f"must be a DNS-1123 subdomain, got {self.host!r}")
        if self.ingress_class_name is not None and not _is_dns_subdomain(self.ingress_class_name):
            raise _fail(
                "ingress_class_name", f"must be a DNS-1123 subdomain: {self.ingress_class_name!r}"
            )

    @property
    def run_name(self) -> str:
        """The Volcano Job whose pods the Service selects."""
        return self.volcano_name or volcano_job_name(self.job_id)

    @property
    def name(self) -> str:
        return serving_service_name(self.job_id)


def _serving_metadata(spec: ServingSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_TEAM: label_value(spec.team_slug),
            LABEL_JOB_ID: str(_job_uuid(spec.job_id)),
            LABEL_KIND: "inference",
        },
    }
    if spec.owner_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": JOB_API_VERSION,
                "kind": JOB_KIND,
                "name": spec.run_name,
                "uid": spec.owner_uid,
                # Not the controller: Volcano's svc plugin controls its own headless Service.
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    return metadata


def build_serving_service(spec: ServingSpec) -> dict[str, Any]:
    """A ClusterIP Service on the job's port, selecting its server pods.

    The selector pairs Volcano's pod label (``volcano.sh/job-name``) with the portal's job
    label: either alone would do on a healthy cluster, both together can never pick a pod of
    another job. Only Ready pods become endpoints, which is what the readiness probe is for.
    """
    return {
        "apiVersion": SERVICE_API_VERSION,
        "kind": "Service",
        "metadata": _serving_metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": {
                VOLCANO_LABEL_JOB_NAME: spec.run_name,
                LABEL_JOB_ID: str(_job_uuid(spec.job_id)),
            },
            "ports": [
                {
                    "name": INFERENCE_PORT_NAME,
                    "port": spec.port,
                    "targetPort": INFERENCE_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_serving_ingress(spec: ServingSpec) -> dict[str, Any]:
    """A ``networking.k8s.io/v1`` Ingress routing the job's host to its Service, every path."""
    if spec.host is None:
        raise _fail("host", "an Ingress needs the job's host")
    ingress_spec: dict[str, Any] = {
        "rules": [
            {
                "host": spec.host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {
                                "service": {
                                    "name": spec.name,
                                    "port": {"name": INFERENCE_PORT_NAME},
                                }
                            },
                        }
                    ]
                },
            }
        ]
    }
    if spec.ingress_class_name:
        ingress_spec["ingressClassName"] = spec.ingress_class_name
    return {
        "apiVersion": INGRESS_API_VERSION,
        "kind": "Ingress",
        "metadata": _serving_metadata(spec),
        "spec": ingress_spec,
    }


def serving_url(spec: ServingSpec) -> str:
    """Where a user calls the server: ``https://<host>`` through the Ingress (the cluster's
    ingress controller terminates TLS), else the Service's in-cluster DNS name and port."""
    if spec.host is not None:
        return f"https://{spec.host}"
    return f"http://{spec.name}.{spec.namespace}.svc.cluster.local:{spec.port}"
