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
from rules.jobspec import (
    CONSTRAINT_FIELDS,
    REQUEST_FIELDS,
    env_name_refusal,
    readiness_path_refusal,
    requirement_shortfalls,
)

# Docker/OCI image reference: [host[:port]/]path[:tag][@digest], per distribution/reference.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"  # noqa: E501
IMAGE_RE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?$"
)
NAME_RE = re.compile(r"^[\w][\w .:/+-]*$")

# Env is stored in plain text and shown to the whole team: refuse what looks like a credential
# (``secret_like_env_name``). Spelled anywhere in the name, these always mean one (``PGPASS``:
# libpq's PGPASSWORD and PGPASSFILE; ``PASSFILE`` names a password file, as a ``*CREDENTIALS``
# path names a key file; ``AUTHTOKEN``: ngrok's and the like):
SECRET_LIKE_RE = re.compile(
    r"(PASSWORD|PASSWD|SECRET|CREDENTIAL|PASSPHRASE|PRIVATE_?KEY|API_?KEY|PGPASS|PASSFILE"
    r"|AUTHTOKEN)"
)
# As a whole word (between underscores), these do; ``TOKENIZERS_PARALLELISM`` does not.
SECRET_WORDS = frozenset(
    {"TOKEN", "CREDS", "PASS", "PAT", "HTPASSWD", "ACCESS_KEY", "CONNECTION_STRING", "CONN_STR"}
)
# As the last word: ``*_KEY`` (``SSH_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``GPG_KEY``), ``*_PASS``,
# ``*_PAT`` (a personal access token), ``*_KEY_ID`` (``AWS_ACCESS_KEY_ID``), ``*_AUTH``
# (``HF_AUTH``, ``BASIC_AUTH``, ``PROXY_AUTH``: the value is the credential; ``AUTH_URL`` and
# ``AUTH_MODE`` name something else), ``*_AUTHORIZATION`` (a header's value), ``*_DSN`` (a
# database's connection string, password included).
SECRET_LAST_WORDS = frozenset(
    {"KEY", "KEYS", "PASS", "PAT", "PWD", "KEY_ID", "AUTH", "AUTHORIZATION", "DSN"}
)
# ``*_AUTH`` names that switch authentication on or off rather than hold it.
AUTH_SWITCH_WORDS = frozenset({"NO", "USE", "SKIP", "DISABLE", "ENABLE", "REQUIRE", "WITH"})
# A URL or URI naming a database, cache or broker is a connection string, and those carry the
# password (``DATABASE_URL``, ``REDIS_URL``, ``MONGODB_URI``, ``SQLALCHEMY_DATABASE_URI``). Other
# URLs (``MODEL_URL``, ``WANDB_BASE_URL``, ``MLFLOW_TRACKING_URI``, ``S3_ENDPOINT_URL``) do not.
CONNECTION_URL_WORDS = frozenset(
    {
        "DATABASE",
        "DB",
        "POSTGRES",
        "POSTGRESQL",
        "PG",
        "PSQL",
        "MYSQL",
        "MARIADB",
        "MSSQL",
        "SQL",
        "SQLALCHEMY",
        "JDBC",
        "MONGO",
        "MONGODB",
        "REDIS",
        "VALKEY",
        "MEMCACHED",
        "AMQP",
        "RABBITMQ",
        "BROKER",
        "ELASTICSEARCH",
        "OPENSEARCH",
        "CLICKHOUSE",
        "CASSANDRA",
        "NEO4J",
    }
)
# ``*_KEY`` names that name something other than a credential, and the shell's own ``PWD``;
# Sentry's DSN, which Sentry documents as safe to make public.
NOT_SECRET_ENV_NAMES = frozenset(
    {
        "PWD",
        "CACHE_KEY",
        "SORT_KEY",
        "PARTITION_KEY",
        "PRIMARY_KEY",
        "SHARD_KEY",
        "ROUTING_KEY",
        "GROUP_KEY",
        "METRIC_KEY",
        "DATASET_KEY",
        "CONFIG_KEY",
        "S3_KEY",
        "SENTRY_DSN",
    }
)
SECRET_STORE_HINT = (
    "env is stored in plain text and visible to your team: keep the value in a Kubernetes "
    "Secret in the job's namespace on the cluster and reference it in env_from_secrets "
    "(NAME: {secret, key}) instead"
)
# A Kubernetes Secret's name (DNS-1123 subdomain) and one of its data keys.
SECRET_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRET_KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")

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

FIELDS = frozenset(REQUEST_FIELDS)
"""A job request's fields (``rules.jobspec.REQUEST_FIELDS``): submit refuses any other."""


@dataclass(frozen=True)
class CatalogEntry:
    """What validation needs to know of a GPU model."""

    key: str
    memory_gib: int
    fp16_tflops: float
    bf16: bool
    fp8: bool
    shared: bool = False
    """A shared (fractional) GPU pool: asked for with ``gpu_memory_gib``, never with GPUs."""


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
    env_from_secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """NAME → {"secret": …, "key": …}: filled by the kubelet from a Secret on the cluster."""
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
    readiness_path: str = ""
    """An inference server's readiness probe: ``GET`` this path on ``port``; empty for a TCP
    probe (ready once the port accepts connections)."""
    gpu_memory_gib: int | None = None
    """A shared GPU: GiB of one device's memory per replica (``gpus_per_replica`` then holds
    the same number, as the pool counts GiB); None for whole GPUs or MIG slices."""
    gpu_cores_percent: int | None = None
    """A shared GPU: the share of the device's compute per replica, 1–100 (None: uncapped)."""

    def as_model_fields(self) -> dict[str, Any]:
        """Keyword arguments for ``Job(...)`` (the team is resolved by the caller)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "env": dict(self.env),
            "env_from_secrets": {n: dict(ref) for n, ref in self.env_from_secrets.items()},
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
            "readiness_path": self.readiness_path,
            "gpu_memory_gib": self.gpu_memory_gib,
            "gpu_cores_percent": self.gpu_cores_percent,
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
    """A required string, taken as given: the submit form strips its fields itself, and a space
    around a team, image or name sent to the API is an error to show, not to guess about."""
    value = data.get(name)
    if value is None or value == "":
        errors.add(name, "This field is required.")
        return ""
    if not isinstance(value, str):
        errors.add(name, "Must be a string.")
        return ""
    return value


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


def _parse_readiness_path(
    data: Mapping[str, Any], errors: _Errors, *, kind: str, port: int | None
) -> str:
    """The readiness probe's HTTP path, or "" for a TCP probe on the port."""
    value = data.get("readiness_path")
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        errors.add("readiness_path", "Must be a string.")
        return ""
    if kind != JobKind.INFERENCE:
        errors.add("readiness_path", "Only inference jobs have a readiness probe.")
    elif port is None:
        errors.add("readiness_path", "Needs the port the server listens on.")
    refusal = readiness_path_refusal(value)  # the manifest builder's rule too
    if refusal is not None:
        errors.add("readiness_path", refusal)
    return value


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


def secret_like_env_name(name: str) -> bool:
    """Whether an env name reads like a credential's (the rules above, upper-cased)."""
    upper = name.upper()
    if upper in NOT_SECRET_ENV_NAMES:
        return False
    if SECRET_LIKE_RE.search(upper):
        return True
    words = upper.split("_")
    pairs = {"_".join(words[i : i + 2]) for i in range(len(words) - 1)}
    if SECRET_WORDS & (set(words) | pairs):
        return True
    if words[-1] in {"URL", "URI"} and CONNECTION_URL_WORDS & set(words[:-1]):
        return True
    if words[-1] == "AUTH" and len(words) > 1 and words[-2] in AUTH_SWITCH_WORDS:
        return False
    last_two = "_".join(words[-2:])
    return words[-1] in SECRET_LAST_WORDS or last_two in SECRET_LAST_WORDS


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
        refusal = env_name_refusal(name)
        if refusal is not None:
            errors.add("env", refusal)
            continue
        if secret_like_env_name(name):
            errors.add("env", f"{name} looks like a secret; {SECRET_STORE_HINT}.")
            continue
        if not isinstance(val, str):
            errors.add("env", f"The value of {name} must be a string.")
            continue
        if len(val.encode()) > MAX_ENV_VALUE_BYTES or "\x00" in val:
            errors.add("env", f"The value of {name} is too long or contains NUL.")
            continue
        env[name] = val
    return env


def _parse_env_from_secrets(
    data: Mapping[str, Any], errors: _Errors, env: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """``{"HF_TOKEN": {"secret": "hf-credentials", "key": "token"}}``: variables the kubelet
    reads from a Secret in the job's namespace, so the value never reaches the portal. Names
    that look like secrets are what this is for; the reference itself is not a secret."""
    field_name = "env_from_secrets"
    value = data.get(field_name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(field_name, 'Must be an object of NAME: {"secret": …, "key": …}.')
        return {}
    if len(value) + len(env) > MAX_ENV_VARS:
        errors.add(field_name, f"At most {MAX_ENV_VARS} variables with env.")
    refs: dict[str, dict[str, str]] = {}
    for name, ref in value.items():
        refusal = env_name_refusal(name)
        if refusal is not None:
            errors.add(field_name, refusal)
            continue
        if name in env:
            errors.add(field_name, f"{name} is also set in env; give it once.")
            continue
        if not isinstance(ref, Mapping) or set(ref) != {"secret", "key"}:
            errors.add(field_name, f'{name}: give exactly {{"secret": …, "key": …}}.')
            continue
        secret, key = ref["secret"], ref["key"]
        if not isinstance(secret, str) or len(secret) > 253 or not SECRET_NAME_RE.fullmatch(secret):
            errors.add(
                field_name,
                f"{name}: {secret!r} is not a Secret name (lower-case letters, digits, - and .).",
            )
            continue
        if (
            not isinstance(key, str)
            or len(key) > 253
            or not SECRET_KEY_RE.fullmatch(key)
            or key.startswith("..")
            or key == "."
        ):
            errors.add(
                field_name, f"{name}: {key!r} is not a Secret key (letters, digits, -, _ and .)."
            )
            continue
        refs[name] = {"secret": secret, "key": key}
    return refs


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
    shared = data.get("gpu_memory_gib") not in (None, "")
    for key in models:
        entry = catalog.get(key)
        if entry is not None and entry.shared and not shared:
            errors.add(
                "gpu_models",
                f"{key} is a shared GPU pool: ask for a share with gpu_memory_gib instead.",
            )
        elif entry is not None and not entry.shared and shared:
            errors.add(
                "gpu_models",
                f"{key} is not a shared GPU pool: a job with gpu_memory_gib runs on shared "
                "pools only.",
            )
    if has_constraints and not errors.fields.keys() & set(CONSTRAINT_FIELDS):
        matching = [e for e in catalog.values() if e.shared == shared and _meets(e, req)]
        if not matching:
            first = next(f for f in CONSTRAINT_FIELDS if req[f] not in (None, False))
            errors.add(first, "No GPU model in the catalog meets these constraints.")
    return req


def _parse_share(
    data: Mapping[str, Any],
    errors: _Errors,
    catalog: Mapping[str, CatalogEntry],
    models: tuple[str, ...],
) -> tuple[int | None, int | None]:
    """(GiB, compute %) of a shared-GPU request, checked against the shared pools the request
    may use: the named ones, else every shared pool. A replica's share lives on one device, so
    it may not ask more memory than the largest of those devices has."""
    memory = _int(data, "gpu_memory_gib", errors, default=None, maximum=4096)
    cores = _int(data, "gpu_cores_percent", errors, default=None, maximum=100)
    if memory is None:
        if cores is not None:
            errors.add("gpu_cores_percent", "Only a shared GPU job (gpu_memory_gib) sets this.")
        return None, None
    if data.get("gpus_per_replica") not in (None, "", 1):
        errors.add(
            "gpus_per_replica",
            "A share lives on one device: leave this at 1 and ask for gpu_memory_gib "
            "(and gpu_cores_percent).",
        )
    pools = [catalog[k] for k in models if k in catalog] or list(catalog.values())
    pools = [e for e in pools if e.shared]
    if not pools:
        errors.add("gpu_memory_gib", "No GPU model in the catalog is offered as a shared pool.")
    elif memory > max(e.memory_gib for e in pools):
        largest = max(pools, key=lambda e: e.memory_gib)
        errors.add(
            "gpu_memory_gib",
            f"At most {largest.memory_gib} GiB: a share lives on one device, and the largest "
            f"shared device is {largest.key} ({largest.memory_gib} GiB).",
        )
    return memory, cores


def _meets(entry: CatalogEntry, req: Mapping[str, Any]) -> bool:
    """Whether the model meets the constraints: the engine's match (``rules.jobspec``)."""
    return not requirement_shortfalls(
        memory_gib=entry.memory_gib,
        fp16_tflops=entry.fp16_tflops,
        bf16=entry.bf16,
        fp8=entry.fp8,
        min_memory_gib=req["min_gpu_memory_gib"],
        min_fp16_tflops=req["min_fp16_tflops"],
        requires_bf16=req["requires_bf16"],
        requires_fp8=req["requires_fp8"],
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
    env_from_secrets = _parse_env_from_secrets(data, errors, env)
    replicas = _int(data, "replicas", errors, default=1, maximum=limits.max_replicas) or 1
    gpus = (
        _int(data, "gpus_per_replica", errors, default=1, maximum=limits.max_gpus_per_replica) or 1
    )
    cpu = _number(data, "cpu_per_replica", errors, minimum=0.1, maximum=512)
    memory = _number(data, "memory_gib_per_replica", errors, minimum=0.25, maximum=4096)
    requirement = _parse_requirement(data, errors, catalog)
    share_gib, share_cores = _parse_share(data, errors, catalog, requirement["gpu_models"])
    if share_gib is not None:
        gpus = share_gib  # a shared pool counts GiB: the gang asks for this many per replica
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
    readiness_path = _parse_readiness_path(data, errors, kind=kind, port=port)

    if errors:
        raise SpecError(errors.fields)
    devices = 1 if share_gib is not None else gpus  # a share's CPU and memory default: one GPU's
    return JobSpec(
        team=team,
        name=name,
        kind=kind,
        image=image,
        command=command,
        args=args,
        env=env,
        env_from_secrets=env_from_secrets,
        replicas=replicas,
        gpus_per_replica=gpus,
        cpu_millicores=round((cpu if cpu is not None else DEFAULT_CPU_PER_GPU * devices) * 1000),
        memory_mib=round(
            (memory if memory is not None else DEFAULT_MEMORY_GIB_PER_GPU * devices) * 1024
        ),
        gpu_memory_gib=share_gib,
        gpu_cores_percent=share_cores,
        allow_fallback=allow_fallback,
        priority=PRIORITY_BY_NAME[priority],
        max_runtime_seconds=(runtime or DEFAULT_MAX_RUNTIME_MINUTES) * 60,
        max_retry=DEFAULT_MAX_RETRY if max_retry is None else max_retry,
        port=port,
        readiness_path=readiness_path,
        **requirement,
    )
