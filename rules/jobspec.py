"""The job request's rules, written once: its fields, which env names and readiness paths it
may give, and which GPU models meet its constraints.

Submit (``portal.jobs.spec``), the manifest builder (``rules.volcano``), the scheduling engine
and the forms and serializers all apply these, so a request the portal accepts is one the
cluster accepts and the engine matches the way submit promised. Each caller keeps its own
wording where it has one (a field error for the user, a ``ManifestError`` for the builder);
the rule itself is here.
"""

from __future__ import annotations

import re
from typing import Final, Literal, NamedTuple

__all__ = [
    "CONSTRAINT_FIELDS",
    "ENV_NAME",
    "MAX_READINESS_PATH",
    "READINESS_PATH",
    "REQUEST_FIELDS",
    "REQUIREMENT_FIELDS",
    "RESERVED_ENV_NAMES",
    "RESERVED_ENV_PREFIXES",
    "Shortfall",
    "env_name_refusal",
    "readiness_path_refusal",
    "requirement_shortfalls",
]

# --- The fields -------------------------------------------------------------------------------

CONSTRAINT_FIELDS: Final[tuple[str, ...]] = (
    "min_gpu_memory_gib",
    "requires_bf16",
    "requires_fp8",
    "min_fp16_tflops",
)
"""The constraints a request may give instead of a list of GPU models (AND-ed)."""

REQUEST_FIELDS: Final[tuple[str, ...]] = (
    "team",
    "name",
    "kind",
    "image",
    "command",
    "args",
    "env",
    "env_from_secrets",
    "replicas",
    "gpus_per_replica",
    "gpu_memory_gib",
    "gpu_cores_percent",
    "cpu_per_replica",
    "memory_gib_per_replica",
    "gpu_models",
    *CONSTRAINT_FIELDS,
    "selection_policy",
    "allow_fallback",
    "priority",
    "max_runtime_minutes",
    "max_retry",
    "port",
    "readiness_path",
)
"""A job request's fields, as the API, the form, templates and batch submit name them, in the
order the API shows them. Submit refuses any other; a job's stored row names a few of them
differently (``cpu_millicores``, ``memory_mib``, ``max_runtime_seconds``)."""

REQUIREMENT_FIELDS: Final[tuple[str, ...]] = (
    "gpu_models",
    *CONSTRAINT_FIELDS,
    "selection_policy",
    "gpu_memory_gib",
)
"""The fields (request and stored row alike) that decide which GPU models a job may run on;
``gpu_memory_gib`` says whether it asks for a share of a shared pool."""

# --- Env names --------------------------------------------------------------------------------

ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A variable name a shell and the kubelet accept (a C identifier)."""

RESERVED_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES", "HOSTNAME"}
)
RESERVED_ENV_PREFIXES: Final[tuple[str, ...]] = ("GPUPOOL_", "VC_", "VK_", "KUBERNETES_", "NVIDIA_")
"""Names the platform sets in every pod: the portal (``GPUPOOL_JOB_ID``, ``GPUPOOL_ATTEMPT``),
Volcano's env, svc and pytorch plugins (``VC_*``, ``VK_*``, ``MASTER_ADDR`` … ``RANK``), the
device plugin (``NVIDIA_*``, ``CUDA_VISIBLE_DEVICES``) and Kubernetes (``KUBERNETES_*``,
``HOSTNAME``). A user's value would shadow theirs or be shadowed by it, so it is refused rather
than silently lost; compared upper-cased, as a lower-case ``rank`` is too easily meant as one."""


def env_name_refusal(name: object) -> str | None:
    """Why ``name`` cannot be one of a job's env variables (plain or from a Secret), in a
    sentence a user reads; None when it can."""
    if not isinstance(name, str) or ENV_NAME.fullmatch(name) is None:
        return f"{name!r} is not a valid variable name (letters, digits, _)."
    upper = name.upper()
    if upper in RESERVED_ENV_NAMES or upper.startswith(RESERVED_ENV_PREFIXES):
        return f"{name} is set by the platform and cannot be overridden."
    return None


# --- The readiness path -----------------------------------------------------------------------

READINESS_PATH: Final = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*")
"""An absolute URL path, printable ASCII without spaces or a fragment: what a kubelet's HTTP
probe can send."""
MAX_READINESS_PATH: Final = 1024


def readiness_path_refusal(path: object) -> str | None:
    """Why ``path`` cannot be an inference server's HTTP readiness path, in a sentence a user
    reads; None when it can."""
    if not isinstance(path, str):
        return "Must be a string."
    if len(path) > MAX_READINESS_PATH:
        return f"Must be at most {MAX_READINESS_PATH} characters."
    if READINESS_PATH.fullmatch(path) is None:
        return "Must be an absolute path such as /health, without spaces or #."
    return None


# --- The requirement match --------------------------------------------------------------------


class Shortfall(NamedTuple):
    """One constraint a GPU model does not meet: what, what the model has, what was asked
    (for ``bf16`` and ``fp8``: 0 and 1)."""

    what: Literal["memory_gib", "fp16_tflops", "bf16", "fp8"]
    has: float
    needs: float


def requirement_shortfalls(
    *,
    memory_gib: float,
    fp16_tflops: float,
    bf16: bool,
    fp8: bool,
    min_memory_gib: float | None,
    min_fp16_tflops: float | None,
    requires_bf16: bool,
    requires_fp8: bool,
) -> list[Shortfall]:
    """The constraints a GPU model (its memory, dense fp16 TFLOPS, bf16 and fp8) fails, in
    that order; empty when it meets them all. A minimum of None or 0 asks for nothing."""
    failures: list[Shortfall] = []
    if min_memory_gib and memory_gib < min_memory_gib:
        failures.append(Shortfall("memory_gib", memory_gib, min_memory_gib))
    if min_fp16_tflops and fp16_tflops < min_fp16_tflops:
        failures.append(Shortfall("fp16_tflops", fp16_tflops, min_fp16_tflops))
    if requires_bf16 and not bf16:
        failures.append(Shortfall("bf16", 0, 1))
    if requires_fp8 and not fp8:
        failures.append(Shortfall("fp8", 0, 1))
    return failures
