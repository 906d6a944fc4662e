"""JobSpec: the one validation path shared by the submit form, the REST API and batch submit.

``parse_job_spec`` takes raw, untrusted data (a JSON body, or a form's cleaned data) and returns
a frozen ``JobSpec`` or raises ``SpecError`` with every problem keyed by the field it concerns.
It checks types itself, so a JSON body needs no other pass; it touches no database: the caller
hands it the catalog and the limits. Team membership is checked by ``job_submit``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from portal.models import JobKind, Priority, SelectionPolicy

# Docker/OCI image reference: [host[:port]/]path[:tag][@digest], per distribution/reference.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"  # noqa: E501
IMAGE_RE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?$"
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_RE = re.compile(r"^[\w][\w .:/+-]*$")

# Names the platform sets itself (Volcano's env/svc/pytorch plugins, the device plugin, k8s).
RESERVED_ENV_PREFIXES = ("VC_", "VK_", "GPUPOOL_", "KUBERNETES_", "NVIDIA_")
RESERVED_ENV_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES", "HOSTNAME"}
)
# Env is stored in plain text and shown to the whole team: refuse what looks like a credential.
SECRET_LIKE_RE = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|PRIVATE_KEY|CREDENTIAL)")

MAX_ENV_VARS = 100
MAX_ENV_VALUE_BYTES = 4096
MAX_COMMAND_ITEMS = 256
MAX_COMMAND_BYTES = 16384
MAX_NAME_LENGTH = 100

DEFAULT_CPU_PER_GPU = 4
DEFAULT_MEMORY_GIB_PER_GPU = 16
DEFAULT_MAX_RUNTIME_MINUTES = 24 * 60
DEFAULT_MAX_RETRY = 3  # Volcano's own default for maxRetry

PRIORITY_BY_NAME = {p.label: p.value for p in Priority}
# Choices' ``.values`` builds a new list on every access; a batch asks 2,000 times.
KIND_VALUES = tuple(JobKind.values)
POLICY_VALUES = tuple(SelectionPolicy.values)

FIELDS = frozenset(
    {
        "team",
        "name",
        "kind",
        "image",
        "command",
        "args",
        "env",
        "replicas",
        "gpus_per_replica",
        "cpu_per_replica",
        "memory_gib_per_replica",
        "gpu_models",
        "min_gpu_memory_gib",
        "requires_bf16",
        "requires_fp8",
        "min_fp16_tflops",
        "selection_policy",
        "allow_fallback",
        "priority",
        "max_runtime_minutes",
        "max_retry",
        "port",
    }
)
CONSTRAINT_FIELDS = ("min_gpu_memory_gib", "requires_bf16", "requires_fp8", "min_fp16_tflops")


@dataclass(frozen=True)
class CatalogEntry:
    """What validation needs to know of a GPU model."""

    key: str
    memory_gib: int
    fp16_tflops: float
    bf16: bool
    fp8: bool


@dataclass(frozen=True)
class SpecLimits:
    max_gpus_per_replica: int = 8
    max_replicas: int = 512
    max_runtime_minutes: int = 7 * 24 * 60
    max_retry: int = 10


@dataclass(frozen=True)
class JobSpec:
    """A validated job request, before it is a row."""

    team: str
    name: str
    image: str
    kind: str = JobKind.TRAINING
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    replicas: int = 1
    gpus_per_replica: int = 1
    cpu_millicores: int = 4000
    memory_mib: int = 16384
    gpu_models: tuple[str, ...] = ()
    min_gpu_memory_gib: int | None = None
    requires_bf16: bool = False
    requires_fp8: bool = False
    min_fp16_tflops: float | None = None
    selection_policy: str = SelectionPolicy.CHEAPEST
    allow_fallback: bool = True
    priority: int = Priority.NORMAL
    max_runtime_seconds: int = DEFAULT_MAX_RUNTIME_MINUTES * 60
    max_retry: int = DEFAULT_MAX_RETRY
    port: int | None = None

    def as_model_fields(self) -> dict[str, Any]:
        """Keyword arguments for ``Job(...)`` (the team is resolved by the caller)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "env": dict(self.env),
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "cpu_millicores": self.cpu_millicores,
            "memory_mib": self.memory_mib,
            "gpu_models": list(self.gpu_models),
            "min_gpu_memory_gib": self.min_gpu_memory_gib,
            "requires_bf16": self.requires_bf16,
            "requires_fp8": self.requires_fp8,
            "min_fp16_tflops": self.min_fp16_tflops,
            "selection_policy": self.selection_policy,
            "allow_fallback": self.allow_fallback,
            "priority": self.priority,
            "max_runtime_seconds": self.max_runtime_seconds,
            "max_retry": self.max_retry,
            "port": self.port,
        }


class SpecError(ValueError):
    """Invalid input; ``fields`` maps each offending field to its messages."""

    def __init__(
        self, fields: Mapping[str, list[str]], message: str = "Invalid job request."
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fields = dict(fields)


class _Errors:
    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.fields.setdefault(name, []).append(message)

    def __bool__(self) -> bool:
        return bool(self.fields)


def _int(
    data: Mapping[str, Any],
    name: str,
    errors: _Errors,
    *,
    default: int | None,
    minimum: int = 1,
    maximum: int | None = None,
) -> int | None:
    value = data.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            errors.add(name, "Must be a whole number.")
            return default
    if value < minimum:
        errors.add(name, f"Must be at least {minimum}.")
    elif maximum is not None and value > maximum:
        errors.add(name, f"Must be at most {maximum}.")
    return value


def _number(
    data: Mapping[str, Any], name: str, errors: _Errors, *, minimum: float, maximum: float
) -> float | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(name, "Must be a number.")
        return None
    if not (minimum <= value <= maximum):
        errors.add(name, f"Must be between {minimum:g} and {maximum:g}.")
        return None
    return float(value)


def _bool(data: Mapping[str, Any], name: str, errors: _Errors, *, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        errors.add(name, "Must be true or false.")
        return default
    return value


def _choice(
    data: Mapping[str, Any], name: str, errors: _Errors, choices: Iterable[str], default: str
) -> str:
    value = data.get(name)
    if value is None or value == "":
        return default
    allowed = list(choices)
    if value not in allowed:
        errors.add(name, f"Must be one of: {', '.join(allowed)}.")
        return default
    return str(value)


def _text(data: Mapping[str, Any], name: str, errors: _Errors) -> str:
    value = data.get(name)
    if value is None or value == "":
        errors.add(name, "This field is required.")
        return ""
    if not isinstance(value, str):
        errors.add(name, "Must be a string.")
        return ""
    return value.strip()


def _string_list(data: Mapping[str, Any], name: str, errors: _Errors) -> tuple[str, ...]:
    value = data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        errors.add(name, "Must be a list of strings.")
        return ()
    if len(value) > MAX_COMMAND_ITEMS:
        errors.add(name, f"At most {MAX_COMMAND_ITEMS} items.")
    if any("\x00" in v for v in value):
        errors.add(name, "Must not contain NUL characters.")
    return tuple(value)


def _parse_name(data: Mapping[str, Any], errors: _Errors) -> str:
    name = _text(data, "name", errors)
    if name and len(name) > MAX_NAME_LENGTH:
        errors.add("name", f"At most {MAX_NAME_LENGTH} characters.")
    elif name and not NAME_RE.match(name):
        errors.add("name", "Use letters, digits, spaces and . _ - : / + only.")
    return name


def _parse_image(data: Mapping[str, Any], errors: _Errors) -> str:
    image = _text(data, "image", errors)
    if image and (len(image) > 512 or not IMAGE_RE.match(image)):
        errors.add(
            "image",
            "Not a valid image reference; expected e.g. registry.example.com/team/trainer:1.2 "
            "or pytorch/pytorch@sha256:<digest>.",
        )
    return image


def _parse_env(data: Mapping[str, Any], errors: _Errors) -> dict[str, str]:
    value = data.get("env")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add("env", "Must be an object of NAME: value strings.")
        return {}
    if len(value) > MAX_ENV_VARS:
        errors.add("env", f"At most {MAX_ENV_VARS} variables.")
    env: dict[str, str] = {}
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            errors.add("env", f"{name!r} is not a valid variable name (letters, digits, _).")
            continue
        upper = name.upper()
        if upper in RESERVED_ENV_NAMES or upper.startswith(RESERVED_ENV_PREFIXES):
            errors.add("env", f"{name} is set by the platform and cannot be overridden.")
            continue
        if SECRET_LIKE_RE.search(upper):
            errors.add(
                "env",
                f"{name} looks like a secret; env is stored in plain text and visible to your "
                "team, so pass credentials through your cluster's secret store instead.",
            )
            continue
        if not isinstance(val, str):
            errors.add("env", f"The value of {name} must be a string.")
            continue
        if len(val.encode()) > MAX_ENV_VALUE_BYTES or "\x00" in val:
            errors.add("env", f"The value of {name} is too long or contains NUL.")
            continue
        env[name] = val
    return env


def _parse_requirement(
    data: Mapping[str, Any], errors: _Errors, catalog: Mapping[str, CatalogEntry]
) -> dict[str, Any]:
    models = _string_list(data, "gpu_models", errors)
    if len(set(models)) != len(models):
        errors.add("gpu_models", "Each model may appear once.")
    unknown = [m for m in models if m not in catalog]
    if unknown:
        errors.add(
            "gpu_models",
            f"Unknown GPU model(s): {', '.join(unknown)}. Known: {', '.join(sorted(catalog))}.",
        )
    req = {
        "gpu_models": models,
        "min_gpu_memory_gib": _int(data, "min_gpu_memory_gib", errors, default=None, maximum=4096),
        "requires_bf16": _bool(data, "requires_bf16", errors, default=False),
        "requires_fp8": _bool(data, "requires_fp8", errors, default=False),
        "min_fp16_tflops": _number(data, "min_fp16_tflops", errors, minimum=0, maximum=100000),
    }
    policy = _choice(data, "selection_policy", errors, POLICY_VALUES, SelectionPolicy.CHEAPEST)
    req["selection_policy"] = policy
    has_constraints = any(req[f] not in (None, False) for f in CONSTRAINT_FIELDS)
    if models and has_constraints:
        errors.add("gpu_models", "Give either a list of GPU models or constraints, not both.")
    if policy == SelectionPolicy.ORDERED and not models:
        errors.add("selection_policy", "'ordered' needs a list of GPU models in gpu_models.")
    if has_constraints and not errors.fields.keys() & set(CONSTRAINT_FIELDS):
        matching = [e for e in catalog.values() if _meets(e, req)]
        if not matching:
            first = next(f for f in CONSTRAINT_FIELDS if req[f] not in (None, False))
            errors.add(first, "No GPU model in the catalog meets these constraints.")
    return req


def _meets(entry: CatalogEntry, req: Mapping[str, Any]) -> bool:
    return (
        (req["min_gpu_memory_gib"] is None or entry.memory_gib >= req["min_gpu_memory_gib"])
        and (not req["requires_bf16"] or entry.bf16)
        and (not req["requires_fp8"] or entry.fp8)
        and (req["min_fp16_tflops"] is None or entry.fp16_tflops >= req["min_fp16_tflops"])
    )


def parse_job_spec(
    data: Mapping[str, Any],
    *,
    catalog: Mapping[str, CatalogEntry],
    limits: SpecLimits,
) -> JobSpec:
    """Validate raw input into a JobSpec, or raise SpecError naming every bad field."""
    errors = _Errors()
    if not isinstance(data, Mapping):
        raise SpecError({"non_field_errors": ["Expected a JSON object."]})
    for unknown in sorted(set(data) - FIELDS):
        errors.add(str(unknown), "Unknown field.")

    team = _text(data, "team", errors)
    name = _parse_name(data, errors)
    kind = _choice(data, "kind", errors, KIND_VALUES, JobKind.TRAINING)
    image = _parse_image(data, errors)
    command = _string_list(data, "command", errors)
    args = _string_list(data, "args", errors)
    if sum(len(s.encode()) for s in (*command, *args)) > MAX_COMMAND_BYTES:
        errors.add("command", f"Command and args together exceed {MAX_COMMAND_BYTES} bytes.")
    env = _parse_env(data, errors)
    replicas = _int(data, "replicas", errors, default=1, maximum=limits.max_replicas) or 1
    gpus = (
        _int(data, "gpus_per_replica", errors, default=1, maximum=limits.max_gpus_per_replica) or 1
    )
    cpu = _number(data, "cpu_per_replica", errors, minimum=0.1, maximum=512)
    memory = _number(data, "memory_gib_per_replica", errors, minimum=0.25, maximum=4096)
    requirement = _parse_requirement(data, errors, catalog)
    allow_fallback = _bool(data, "allow_fallback", errors, default=True)
    priority = _choice(data, "priority", errors, PRIORITY_BY_NAME, "normal")
    runtime = _int(
        data,
        "max_runtime_minutes",
        errors,
        default=DEFAULT_MAX_RUNTIME_MINUTES,
        maximum=limits.max_runtime_minutes,
    )
    max_retry = _int(
        data, "max_retry", errors, default=DEFAULT_MAX_RETRY, minimum=0, maximum=limits.max_retry
    )
    port = _int(data, "port", errors, default=None, minimum=1024, maximum=65535)
    if port is not None and kind != JobKind.INFERENCE:
        errors.add("port", "Only inference jobs serve a port.")

    if errors:
        raise SpecError(errors.fields)
    return JobSpec(
        team=team,
        name=name,
        kind=kind,
        image=image,
        command=command,
        args=args,
        env=env,
        replicas=replicas,
        gpus_per_replica=gpus,
        cpu_millicores=round((cpu if cpu is not None else DEFAULT_CPU_PER_GPU * gpus) * 1000),
        memory_mib=round(
            (memory if memory is not None else DEFAULT_MEMORY_GIB_PER_GPU * gpus) * 1024
        ),
        allow_fallback=allow_fallback,
        priority=PRIORITY_BY_NAME[priority],
        max_runtime_seconds=(runtime or DEFAULT_MAX_RUNTIME_MINUTES) * 60,
        max_retry=DEFAULT_MAX_RETRY if max_retry is None else max_retry,
        port=port,
        **requirement,
    )
