"""Names, labels and the checks every Volcano builder shares: the API identities, the labels
the adapter selects on, the Volcano Job's and pods' names, and Kubernetes' name rules."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final, Literal

from rules.jobspec import MAX_READINESS_PATH, READINESS_PATH

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

# A sanity bound, far below what pod names allow (see ``volcano_job_name``).
MAX_REPLICAS: Final = 4096
# Runs of one job: requeues after node failures are not bounded by the user's limits.
MAX_ATTEMPT: Final = 99_999
MAX_GPUS_PER_REPLICA: Final = 64
INT32_MAX: Final = 2**31 - 1

# Environment the portal sets in every container; a user may not set these (nor any name the
# job request's rule reserves: ``rules.jobspec.RESERVED_ENV_NAMES`` and its prefixes).
PORTAL_ENV_JOB_ID: Final = "GPUPOOL_JOB_ID"
PORTAL_ENV_ATTEMPT: Final = "GPUPOOL_ATTEMPT"

# --- Validation patterns (Kubernetes apimachinery's, as regular expressions) ----------------

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
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


def readiness_path_check(path: str) -> str:
    """``path`` if it can be an HTTP readiness probe's path: absolute, printable ASCII without
    spaces or fragments, at most 1024 characters; else :class:`ManifestError` naming the field.
    The job request's rule (``rules.jobspec``), which submit applies too, so a bad path is a
    400 and never a refused pod."""
    if not isinstance(path, str) or len(path) > MAX_READINESS_PATH:
        raise _fail("readiness_path", f"must be at most {MAX_READINESS_PATH} characters")
    if READINESS_PATH.fullmatch(path) is None:
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
