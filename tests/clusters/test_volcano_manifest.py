"""The Volcano manifest builder, checked the way a cluster would check its output.

Every manifest is validated against the real CRD schemas (Volcano v1.15.1 and master) with
unknown fields rejected as ``fieldValidation=Strict`` would, then against the admission rules
Volcano's webhook enforces beyond the schema. Hypothesis drives the builder over the whole
input space; named tests pin the decisions a reader should be able to find.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from rules import jobspec, volcano
from rules.volcano import (
    ANNOTATION_PORTAL_URL,
    ANNOTATION_SUBMISSION_UID,
    LABEL_GPU_MODEL,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MAX_REPLICAS,
    ManifestError,
    Toleration,
    VolcanoJobSpec,
    build_queue_command,
    build_volcano_job,
    build_volcano_queue,
    cpu_quantity,
    job_selector,
    label_value,
    managed_selector,
    memory_quantity,
    pod_name,
    replica_of_pod,
    replica_pod_name,
    team_namespace_name,
    volcano_job_name,
    volcano_queue_name,
)

# --- The CRDs -------------------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_REFERENCE = REPO_ROOT.parent / "shared" / "k8s-reference"
CRD_VERSIONS = ("volcano-v1.15.1", "volcano-master")

# The CRDs describe ``metadata`` only as ``type: object``; the API server checks it as
# ObjectMeta. These are the ObjectMeta fields a client may set.
OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
    },
}


def _load_schema(version: str, filename: str) -> dict[str, Any]:
    path = K8S_REFERENCE / "crds" / version / filename
    if not path.is_file():
        pytest.fail(
            f"CRD {path} is missing: the shared k8s-reference checkout must sit beside the repo "
            "(../shared/k8s-reference); manifests are never accepted unvalidated"
        )
    crd = yaml.safe_load(path.read_text())
    schema = copy.deepcopy(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = OBJECT_META_SCHEMA
    return schema


JOB_SCHEMAS = {v: _load_schema(v, "batch.volcano.sh_jobs.yaml") for v in CRD_VERSIONS}
QUEUE_SCHEMAS = {v: _load_schema(v, "scheduling.volcano.sh_queues.yaml") for v in CRD_VERSIONS}
JOB_VALIDATORS = {v: Draft7Validator(s) for v, s in JOB_SCHEMAS.items()}
QUEUE_VALIDATORS = {v: Draft7Validator(s) for v, s in QUEUE_SCHEMAS.items()}


def unknown_fields(instance: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths in ``instance`` the schema does not declare: what ``fieldValidation=Strict`` rejects.

    Also checks the list semantics the API server enforces and JSON Schema ignores:
    ``x-kubernetes-list-type: map`` keys and ``set`` items must be unique.
    """
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(instance, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in instance.items():
            child = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                yield from unknown_fields(value, properties[key], child)
            elif isinstance(additional, dict):
                yield from unknown_fields(value, additional, child)
            else:
                yield child
    elif isinstance(instance, list):
        items = schema.get("items", {})
        for index, value in enumerate(instance):
            yield from unknown_fields(value, items, f"{path}[{index}]")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = Counter(tuple(json.dumps(item.get(k)) for k in keys) for item in instance)
            yield from (f"{path}: duplicate list-map key {k}" for k, n in seen.items() if n > 1)
        elif list_type == "set":
            seen_items = Counter(json.dumps(item, sort_keys=True) for item in instance)
            yield from (f"{path}: duplicate set item {k}" for k, n in seen_items.items() if n > 1)


def schema_errors(manifest: dict[str, Any], validators: dict[str, Draft7Validator]) -> list[str]:
    errors = []
    for version, validator in validators.items():
        for error in validator.iter_errors(manifest):
            errors.append(f"{version}: {error.json_path}: {error.message}")
        for field in unknown_fields(manifest, validator.schema):
            errors.append(f"{version}: unknown field {field}")
    return errors


# --- Volcano's admission rules beyond the schema ---------------------------------------------

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KNOWN_PLUGINS = {"env", "svc", "ssh", "pytorch", "tensorflow", "mpi", "ray", "hcclrank"}
USER_EVENTS = {
    "*",
    "PodFailed",
    "PodEvicted",
    "PodPending",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
}
USER_ACTIONS = {
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
}
JOB_LEVEL_EVENTS = {"Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"}
POD_LEVEL_EVENTS = {"PodFailed", "PodEvicted", "PodPending"}


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and DNS1123_LABEL.fullmatch(value) is not None


def is_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and all(is_dns_label(p) for p in prefix.split("."))):
        return False
    return len(name) <= 63 and QUALIFIED_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


def policy_errors(policies: list[dict[str, Any]], where: str) -> list[str]:
    errors = []
    events: list[str] = []
    exit_codes: list[int] = []
    for policy in policies:
        if policy.get("action") not in USER_ACTIONS:
            errors.append(f"{where}: action {policy.get('action')!r} is not allowed")
        listed = ([policy["event"]] if "event" in policy else []) + policy.get("events", [])
        if listed and "exitCode" in policy:
            errors.append(f"{where}: a policy has both events and an exit code")
        if not listed and "exitCode" not in policy:
            errors.append(f"{where}: a policy needs an event or an exit code")
        if "exitCode" in policy:
            if policy["exitCode"] == 0:
                errors.append(f"{where}: exit code 0 is not an error")
            exit_codes.append(policy["exitCode"])
        for event in listed:
            if event not in USER_EVENTS:
                errors.append(f"{where}: event {event!r} is internal")
            if policy.get("action") == "RestartTask" and event in JOB_LEVEL_EVENTS:
                errors.append(f"{where}: RestartTask cannot follow the job-level event {event}")
            if policy.get("action") == "RestartPod" and event not in POD_LEVEL_EVENTS:
                errors.append(f"{where}: RestartPod needs a pod-level event, not {event}")
        events.extend(listed)
    if "*" in events and len(events) > 1:
        errors.append(f"{where}: '*' must be the only event")
    errors += [f"{where}: event {e} repeats" for e, n in Counter(events).items() if n > 1]
    errors += [f"{where}: exit code {c} repeats" for c, n in Counter(exit_codes).items() if n > 1]
    return errors


def admission_errors(job: dict[str, Any]) -> list[str]:
    """What Volcano's validating webhook (and its ValidatingAdmissionPolicies) would refuse."""
    errors = []
    name = job["metadata"]["name"]
    spec = job["spec"]
    tasks = spec.get("tasks", [])
    if not DNS1035_LABEL.fullmatch(name) or len(name) > 63:
        errors.append(f"job name {name!r} cannot name the svc plugin's Service")
    if not tasks:
        errors.append("a job needs at least one task")
    names = [t["name"] for t in tasks]
    errors += [f"task {n} repeats" for n, count in Counter(names).items() if count > 1]
    total = 0
    for task in tasks:
        replicas = task.get("replicas", 0)
        total += replicas
        if task.get("minAvailable", replicas) > replicas:
            errors.append(f"task {task['name']}: minAvailable exceeds replicas")
        if not is_dns_label(task["name"]):
            errors.append(f"task name {task['name']!r} is not a DNS-1123 label")
        for index in (0, replicas - 1):
            pod = pod_name(name, task["name"], index)
            if len(pod) > 63 or not QUALIFIED_NAME.fullmatch(pod) or not is_dns_label(pod):
                errors.append(f"pod name {pod!r} is not a valid qualified name / hostname")
        errors += policy_errors(task.get("policies", []), f"task {task['name']}")
        pod_spec = task["template"]["spec"]
        for container in pod_spec["containers"]:
            env_names = [e["name"] for e in container.get("env", [])]
            errors += [
                f"env {e!r} is not a C identifier"
                for e in env_names
                if not C_IDENTIFIER.fullmatch(e)
            ]
            errors += [f"env {e} repeats" for e, n in Counter(env_names).items() if n > 1]
        for key, value in task["template"].get("metadata", {}).get("labels", {}).items():
            if not is_label_key(key) or not is_label_value(value):
                errors.append(f"pod label {key}={value!r} is invalid")
    if spec.get("minAvailable", total) > total:
        errors.append("minAvailable exceeds the sum of task replicas")
    errors += policy_errors(spec.get("policies", []), "job")
    errors += [f"unknown plugin {p}" for p in spec.get("plugins", {}) if p not in KNOWN_PLUGINS]
    if "mpi" in spec.get("plugins", {}) and "master" not in names:
        errors.append("the mpi plugin needs a master task")
    if spec.get("queue") == "root":
        errors.append("jobs cannot be submitted to the root queue")
    for key, value in job["metadata"].get("labels", {}).items():
        if not is_label_key(key) or not is_label_value(value):
            errors.append(f"job label {key}={value!r} is invalid")
    return errors


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a manifest, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def assert_valid_job(job: dict[str, Any]) -> None:
    problems = schema_errors(job, JOB_VALIDATORS) + admission_errors(job)
    assert not problems, "\n".join(problems)


# --- Builders for the tests ------------------------------------------------------------------

JOB_ID = "6f1c2a9e-0b7d-4c1e-9a55-3e2f1d0c9b8a"


def a_spec(**overrides: Any) -> VolcanoJobSpec:
    fields: dict[str, Any] = {
        "job_id": JOB_ID,
        "display_name": "llama fine-tune",
        "team_slug": "vision",
        "namespace": "gp-vision",
        "queue": "gp-vision",
        "kind": "training",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun"],
        "args": ["--nnodes=$(WORLD_SIZE)", "train.py"],
        "env": {"EPOCHS": "3"},
        "replicas": 1,
        "gpus_per_replica": 8,
        "gpu_resource": "nvidia.com/gpu",
        "gpu_model": "a100-80gb",
        "node_selector": {"gpu-type": "a100-80gb"},
        "cpu_millicores": 32000,
        "memory_mib": 262144,
        "max_runtime_seconds": 86400,
        "submission_uid": "0b9e5d1c-41a7-4f0e-8f43-5d2a8c7e6b10",
        "portal_url": f"https://gpupool.example.org/jobs/{JOB_ID}/",
    }
    fields.update(overrides)
    return VolcanoJobSpec(**fields)


def tasks_of(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def containers_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for t in job["spec"]["tasks"] for c in t["template"]["spec"]["containers"]]


# --- Hypothesis: the whole input space validates ---------------------------------------------

GPU_CHOICES = [
    ("nvidia.com/gpu", "a100-80gb", {"gpu-type": "a100-80gb"}),
    ("nvidia.com/gpu", "h100-sxm", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    ("nvidia.com/gpu", "t4", {"nvidia.com/gpu.product": "Tesla-T4"}),
    ("nvidia.com/mig-1g.10gb", "a100-80gb-mig-1g.10gb", {"gpu-type": "a100-80gb"}),
    ("nvidia.com/mig-3g.40gb", "h100-sxm-mig-3g.40gb", {"nvidia.com/mig.strategy": "mixed"}),
    ("nvidia.com/mig-1g.10gb.me", "a100-80gb-mig-1g.10gb+me", {"gpu-type": "a100-80gb"}),
    ("nvidia.com/mig-7g.141gb", "h200-mig-7g.141gb", {"nvidia.com/gpu.product": "NVIDIA-H200"}),
    ("amd.com/gpu", "mi300x", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
]

dns_labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(
    lambda n: jobspec.env_name_refusal(n) is None
)
secret_refs = st.builds(
    volcano.SecretKeyRef,
    secret=dns_labels,
    key=st.from_regex(r"[-_a-zA-Z0-9][-._a-zA-Z0-9]{0,40}", fullmatch=True),
)
tolerations = st.sampled_from(
    [
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        Toleration(key="dedicated", operator="Equal", value="gpu", effect="NoSchedule"),
        Toleration(
            key="node.kubernetes.io/unreachable", effect="NoExecute", toleration_seconds=300
        ),
        Toleration(key="", operator="Exists"),
    ]
)


@st.composite
def job_specs(draw: st.DrawFn) -> VolcanoJobSpec:
    gpu_resource, gpu_model, node_selector = draw(st.sampled_from(GPU_CHOICES))
    node_label_in: dict[str, list[str]] = {}
    if draw(st.booleans()):  # one product spelled two ways: an In affinity instead
        node_label_in = {k: sorted({v, "alt-spelling"}) for k, v in node_selector.items()}
        node_selector = {}
    memory_mib = draw(st.integers(1, 2 * 1024 * 1024))
    kind = draw(st.sampled_from(["training", "inference"]))
    env = draw(st.dictionaries(env_names, st.text(max_size=40), max_size=6))
    return VolcanoJobSpec(
        job_id=str(draw(st.uuids())),
        display_name=draw(st.text(max_size=80)),
        team_slug=draw(
            st.one_of(
                st.from_regex(r"[a-z0-9][a-z0-9_-]{0,48}[a-z0-9]", fullmatch=True),
                st.text(min_size=1, max_size=120),  # whatever a slug field lets through
            )
        ),
        namespace=draw(dns_labels),
        queue=draw(dns_labels.filter(lambda q: q != "root")),
        kind=kind,
        image=draw(
            st.sampled_from(
                [
                    "nvcr.io/nvidia/pytorch:24.05-py3",
                    "ghcr.io/org/trainer@sha256:" + "a" * 64,
                    "vllm/vllm-openai:latest",
                    "registry.local:5000/team/img",
                ]
            )
        ),
        command=draw(st.lists(st.text(max_size=30), max_size=4)),
        args=draw(st.lists(st.text(max_size=30), max_size=6)),
        env=env,
        env_from_secrets=draw(
            st.dictionaries(env_names.filter(lambda n: n not in env), secret_refs, max_size=3)
        ),
        replicas=draw(st.integers(1, 512)),
        attempt=draw(st.integers(1, 99_999)),
        gpus_per_replica=draw(st.integers(1, 8)),
        gpu_resource=gpu_resource,
        gpu_model=gpu_model,
        node_selector=node_selector,
        node_label_in=node_label_in,
        cpu_millicores=draw(st.integers(1, 256_000)),
        memory_mib=memory_mib,
        max_runtime_seconds=draw(st.integers(1, 30 * 24 * 3600)),
        port=draw(st.none() | st.integers(1, 65535)),
        readiness_path=draw(st.none() | st.sampled_from(["/", "/health", "/v1/models?ready=1"])),
        scheduler_name=draw(st.sampled_from(["volcano", "volcano-gpu"])),
        submission_uid=str(draw(st.uuids())),
        portal_url=f"https://gpupool.example.org/jobs/{draw(st.uuids())}/",
        priority_class_name=draw(st.none() | st.sampled_from(["gpupool-high", "batch.low"])),
        max_retry=draw(st.integers(0, 10)),
        ttl_seconds_after_finished=draw(st.none() | st.integers(0, 30 * 24 * 3600)),
        tolerations=draw(st.lists(tolerations, max_size=3, unique=True)),
        automount_service_account_token=draw(st.booleans()),
        run_as_non_root=draw(st.booleans()),
        shm_mib=draw(st.integers(0, memory_mib)),
        termination_grace_seconds=draw(st.integers(0, 24 * 3600)),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_specs())
def test_every_generated_job_passes_the_crd_strictly_and_volcano_admission(spec):
    job = build_volcano_job(spec)

    assert_valid_job(job)
    assert json.loads(json.dumps(job)) == job  # plain JSON, nothing the client must convert
    assert build_volcano_job(spec) == job  # deterministic
    assert job["spec"]["minAvailable"] == spec.replicas
    assert sum(t["replicas"] for t in job["spec"]["tasks"]) == spec.replicas
    for container in containers_of(job):
        limits = container["resources"]["limits"]
        assert limits[spec.gpu_resource] == spec.gpus_per_replica
        assert container["resources"]["requests"] == limits


@settings(max_examples=200, deadline=None)
@given(job_specs(), st.data())
def test_every_replica_maps_to_a_pod_and_back(spec, data):
    job = build_volcano_job(spec)
    replica = data.draw(st.integers(0, spec.replicas - 1))

    name = replica_pod_name(spec.job_id, spec.kind, spec.replicas, replica, spec.attempt)

    task, index = name.removeprefix(job["metadata"]["name"] + "-").rsplit("-", 1)
    assert task in tasks_of(job)
    assert 0 <= int(index) < tasks_of(job)[task]["replicas"]
    assert replica_of_pod(task, int(index)) == replica


# --- Names ------------------------------------------------------------------------------------


def test_job_name_is_deterministic_and_a_dns_label():
    assert volcano_job_name(JOB_ID) == "gp-6f1c2a9e0b7d4c1e9a553e2f1d0c9b8a"
    assert volcano_job_name(JOB_ID.upper()) == volcano_job_name(JOB_ID)
    assert volcano_job_name("{" + JOB_ID + "}") == volcano_job_name(JOB_ID)
    assert DNS1035_LABEL.fullmatch(volcano_job_name(JOB_ID))


def test_each_run_of_a_job_has_a_volcano_job_name_of_its_own():
    names = [volcano_job_name(JOB_ID, attempt) for attempt in (1, 2, 10, 99_999)]

    assert names == [
        "gp-6f1c2a9e0b7d4c1e9a553e2f1d0c9b8a",
        "gp-6f1c2a9e0b7d4c1e9a553e2f1d0c9b8a-a2",
        "gp-6f1c2a9e0b7d4c1e9a553e2f1d0c9b8a-a10",
        "gp-6f1c2a9e0b7d4c1e9a553e2f1d0c9b8a-a99999",
    ]
    assert all(DNS1035_LABEL.fullmatch(name) for name in names)
    for bad in (0, 100_000, True, "2"):
        with pytest.raises(ManifestError, match="attempt"):
            volcano_job_name(JOB_ID, bad)


def test_a_run_is_named_labelled_and_told_to_its_containers():
    job = build_volcano_job(a_spec(attempt=3))

    assert job["metadata"]["name"] == volcano_job_name(JOB_ID, 3)
    assert job["metadata"]["labels"][volcano.LABEL_ATTEMPT] == "3"
    for task in job["spec"]["tasks"]:
        assert task["template"]["metadata"]["labels"][volcano.LABEL_ATTEMPT] == "3"
    env = {e["name"]: e.get("value") for e in containers_of(job)[0]["env"]}
    assert env["GPUPOOL_ATTEMPT"] == "3"
    assert volcano.attempt_of(job["metadata"]["labels"]) == 3
    assert volcano.attempt_of({}) is None  # made before the label: any run's
    assert replica_pod_name(JOB_ID, "training", 2, 1, 3).startswith(volcano_job_name(JOB_ID, 3))


def test_longest_pod_name_fits_at_the_largest_replica_count():
    job_name = volcano_job_name(str(uuid.uuid4()), volcano.MAX_ATTEMPT)

    longest = max(
        pod_name(job_name, task, MAX_REPLICAS - 1)
        for task in (volcano.TASK_MASTER, volcano.TASK_WORKER, volcano.TASK_SERVER)
    )

    assert len(longest) <= 63
    assert len(job_name) + len(volcano.TASK_WORKER) + len(str(MAX_REPLICAS - 1)) + 2 <= 63


@pytest.mark.parametrize("bad", ["", "not-a-uuid", "6f1c2a9e-0b7d-4c1e-9a55"])
def test_job_name_refuses_what_is_not_a_uuid(bad):
    with pytest.raises(ManifestError, match="job_id"):
        volcano_job_name(bad)


@pytest.mark.parametrize(
    ("replica", "expected_suffix"),
    [(0, "master-0"), (1, "worker-0"), (7, "worker-6")],
    ids=["replica 0 is the master", "replica 1 is worker 0", "the last replica"],
)
def test_training_replicas_are_master_then_workers(replica, expected_suffix):
    assert replica_pod_name(JOB_ID, "training", 8, replica).endswith(expected_suffix)


def test_inference_replicas_are_server_pods():
    assert replica_pod_name(JOB_ID, "inference", 3, 2).endswith("-server-2")
    assert replica_of_pod("server", 2) == 2
    assert replica_of_pod("sidecar-task", 0) is None
    with pytest.raises(ManifestError, match="replica"):
        replica_pod_name(JOB_ID, "inference", 3, 3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("vision", "vision"),
        ("a100-80gb-mig-1g.10gb", "a100-80gb-mig-1g.10gb"),
        ("ML_Research", "ML_Research"),
    ],
)
def test_label_value_keeps_valid_values(value, expected):
    assert label_value(value) == expected


@pytest.mark.parametrize(
    "value", ["-leading", "a100-80gb-mig-1g.10gb+me", "x" * 64, "équipe", "a b", "_", "trailing."]
)
def test_label_value_repairs_invalid_values_without_collisions(value):
    repaired = label_value(value)

    assert is_label_value(repaired)
    assert repaired != label_value(value + "2")


@pytest.mark.parametrize("slug", ["vision", "ML_Research", "-x-", "a" * 80, "Équipe Nord"])
def test_queue_and_namespace_names_from_team_slugs_are_dns_labels(slug):
    for name in (volcano_queue_name(slug), team_namespace_name(slug)):
        assert is_dns_label(name)
        assert name.startswith("gp-")
        assert name not in ("root", "default")
    assert volcano_queue_name("vision") == "gp-vision"
    assert volcano_queue_name("a_b") != volcano_queue_name("a-b")


def test_selectors_use_the_exported_label_keys():
    assert managed_selector() == "app.kubernetes.io/managed-by=gpupool"
    assert job_selector(JOB_ID.upper()) == (
        f"app.kubernetes.io/managed-by=gpupool,gpupool.dev/job-id={JOB_ID}"
    )


# --- Quantities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("millicores", "expected"),
    [(1000, "1"), (4000, "4"), (500, "500m"), (1500, "1500m"), (1, "1m")],
)
def test_cpu_quantity(millicores, expected):
    assert cpu_quantity(millicores) == expected


@pytest.mark.parametrize(
    ("mib", "expected"), [(1024, "1Gi"), (16384, "16Gi"), (1536, "1536Mi"), (1, "1Mi")]
)
def test_memory_quantity(mib, expected):
    assert memory_quantity(mib) == expected


# --- Shape: tasks, plugins, policies ---------------------------------------------------------


def test_single_replica_training_is_one_master_task_with_the_pytorch_plugin():
    job = build_volcano_job(a_spec(replicas=1))

    assert list(tasks_of(job)) == ["master"]
    assert tasks_of(job)["master"]["replicas"] == 1
    assert job["spec"]["plugins"]["pytorch"] == [
        "--master=master",
        "--worker=worker",
        "--port=23456",
    ]
    assert_valid_job(job)


def test_multi_replica_training_is_a_gang_of_master_and_workers():
    job = build_volcano_job(a_spec(replicas=4))

    assert [(t["name"], t["replicas"], t["minAvailable"]) for t in job["spec"]["tasks"]] == [
        ("master", 1, 1),
        ("worker", 3, 3),
    ]
    assert job["spec"]["minAvailable"] == 4
    assert set(job["spec"]["plugins"]) == {"env", "svc", "pytorch"}
    assert job["spec"]["plugins"]["svc"] == []  # the NetworkPolicy isolating the gang stays


def test_training_restarts_the_gang_on_eviction_and_terminates_on_failure():
    job = build_volcano_job(a_spec(replicas=2, max_retry=5, ttl_seconds_after_finished=600))

    assert job["spec"]["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "TerminateJob"},
    ]
    assert job["spec"]["maxRetry"] == 5
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    for task in job["spec"]["tasks"]:
        assert task["template"]["spec"]["restartPolicy"] == "Never"
        assert "policies" not in task


def test_inference_is_one_server_task_reachable_on_its_port():
    job = build_volcano_job(a_spec(kind="inference", replicas=3, port=8000))

    assert list(tasks_of(job)) == ["server"]
    pod = tasks_of(job)["server"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    assert pod["containers"][0]["ports"] == [
        {"name": "http", "containerPort": 8000, "protocol": "TCP"}
    ]
    assert job["spec"]["plugins"] == {"env": [], "svc": ["--disable-network-policy"]}
    assert job["spec"]["policies"] == [
        {"event": "PodEvicted", "action": "RestartPod"},
        {"event": "PodFailed", "action": "TerminateJob"},
    ]
    assert_valid_job(job)


def test_queue_scheduler_priority_and_runtime_limit_are_carried():
    job = build_volcano_job(
        a_spec(
            scheduler_name="volcano-gpu",
            priority_class_name="gpupool-high",
            max_runtime_seconds=3600,
        )
    )

    assert job["spec"]["schedulerName"] == "volcano-gpu"
    assert job["spec"]["queue"] == "gp-vision"
    assert job["spec"]["priorityClassName"] == "gpupool-high"
    assert tasks_of(job)["master"]["template"]["spec"]["activeDeadlineSeconds"] == 3600


def test_every_pod_gets_the_teams_grace_period_between_sigterm_and_sigkill():
    job = build_volcano_job(a_spec(replicas=3, termination_grace_seconds=600))

    assert_valid_job(job)
    assert {t["template"]["spec"]["terminationGracePeriodSeconds"] for t in job["spec"]["tasks"]}
    assert all(
        t["template"]["spec"]["terminationGracePeriodSeconds"] == 600 for t in job["spec"]["tasks"]
    )


@pytest.mark.parametrize("bad", [-1, 2**31])
def test_a_grace_period_out_of_range_names_the_field(bad):
    with pytest.raises(ManifestError, match="termination_grace_seconds"):
        a_spec(termination_grace_seconds=bad)


def test_optional_fields_are_left_out_rather_than_sent_empty():
    job = build_volcano_job(
        a_spec(
            command=[], args=[], env={}, ttl_seconds_after_finished=None, priority_class_name=None
        )
    )

    container = containers_of(job)[0]
    assert "command" not in container
    assert "args" not in container
    assert "ports" not in container
    assert "volumeMounts" not in container
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert "priorityClassName" not in job["spec"]
    assert "tolerations" not in job["spec"]["tasks"][0]["template"]["spec"]
    assert container["env"] == [
        {"name": "GPUPOOL_JOB_ID", "value": JOB_ID},
        {"name": "GPUPOOL_ATTEMPT", "value": "1"},
    ]


# --- Resources and placement -----------------------------------------------------------------


def test_resources_are_guaranteed_with_the_gpu_in_requests_and_limits():
    container = containers_of(build_volcano_job(a_spec(cpu_millicores=4500, memory_mib=16384)))[0]

    expected = {"cpu": "4500m", "memory": "16Gi", "nvidia.com/gpu": 8}
    assert container["resources"] == {"requests": expected, "limits": expected}


def test_a_mig_slice_is_requested_by_its_resource_name():
    job = build_volcano_job(
        a_spec(
            gpu_resource="nvidia.com/mig-1g.10gb",
            gpus_per_replica=1,
            gpu_model="a100-80gb-mig-1g.10gb",
        )
    )

    limits = containers_of(job)[0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == 1
    assert "nvidia.com/gpu" not in limits
    assert job["metadata"]["labels"][LABEL_GPU_MODEL] == "a100-80gb-mig-1g.10gb"
    assert_valid_job(job)


def test_node_selector_and_tolerations_place_the_pods_on_the_model():
    spec = a_spec(
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        tolerations=[Toleration(key="nvidia.com/gpu", effect="NoSchedule")],
    )

    pod = build_volcano_job(spec)["spec"]["tasks"][0]["template"]["spec"]

    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_several_spellings_of_a_label_become_a_required_node_affinity():
    spec = a_spec(
        node_selector={},
        node_label_in={"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"]},
    )

    job = build_volcano_job(spec)

    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert "nodeSelector" not in pod
    assert pod["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    assert_valid_job(job)


def test_shared_memory_is_a_memory_backed_empty_dir():
    job = build_volcano_job(a_spec(shm_mib=8192))

    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8192Mi"}}
    ]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert_valid_job(job)


# --- Security ---------------------------------------------------------------------------------


def test_pods_are_restricted_except_for_run_as_non_root():
    job = build_volcano_job(a_spec(replicas=3))

    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["enableServiceLinks"] is False
        assert pod["hostNetwork"] is False
        assert pod["hostPID"] is False
        assert pod["hostIPC"] is False
        assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        assert "serviceAccountName" not in pod
        for container in pod["containers"]:
            assert container["securityContext"] == {
                "privileged": False,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }


def test_run_as_non_root_and_token_mounting_are_opt_in():
    job = build_volcano_job(a_spec(run_as_non_root=True, automount_service_account_token=True))

    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is True


@settings(max_examples=100, deadline=None)
@given(job_specs())
def test_no_generated_job_reaches_into_the_host(spec):
    job = build_volcano_job(spec)

    keys = {key for key, _ in walk(job)}
    assert not keys & {"hostPath", "hostPort", "nodeName", "serviceAccountName", "hostUsers"}
    for key, value in walk(job):
        if key in ("privileged", "allowPrivilegeEscalation", "hostNetwork", "hostPID", "hostIPC"):
            assert value is False
        if key == "capabilities":
            assert value == {"drop": ["ALL"]}


# --- Labels and annotations ------------------------------------------------------------------


def test_job_and_pods_carry_the_portal_labels():
    job = build_volcano_job(a_spec(replicas=2))

    expected = {
        LABEL_MANAGED_BY: "gpupool",
        LABEL_TEAM: "vision",
        LABEL_JOB_ID: JOB_ID,
        LABEL_GPU_MODEL: "a100-80gb",
        "gpupool.dev/kind": "training",
        "gpupool.dev/attempt": "1",
    }
    assert job["metadata"]["labels"] == expected
    for task in job["spec"]["tasks"]:
        assert task["template"]["metadata"]["labels"] == expected


def test_job_annotations_hold_the_submission_uid_and_portal_url():
    job = build_volcano_job(a_spec(display_name="Ünïcode: name / with = signs"))

    assert job["metadata"]["annotations"] == {
        ANNOTATION_SUBMISSION_UID: "0b9e5d1c-41a7-4f0e-8f43-5d2a8c7e6b10",
        ANNOTATION_PORTAL_URL: f"https://gpupool.example.org/jobs/{JOB_ID}/",
        "gpupool.dev/display-name": "Ünïcode: name / with = signs",
    }
    assert job["metadata"]["name"] == volcano_job_name(JOB_ID)
    assert job["metadata"]["namespace"] == "gp-vision"


def test_a_team_slug_that_is_not_a_label_value_still_labels_validly():
    job = build_volcano_job(a_spec(team_slug="-weird_slug-"))

    assert is_label_value(job["metadata"]["labels"][LABEL_TEAM])
    assert_valid_job(job)


def test_env_keeps_the_callers_order_after_the_portal_variables():
    container = containers_of(build_volcano_job(a_spec(env={"B": "1", "A": "$(B)2"})))[0]

    assert [e["name"] for e in container["env"]] == ["GPUPOOL_JOB_ID", "GPUPOOL_ATTEMPT", "B", "A"]


def test_env_from_a_secret_is_a_secret_key_ref_the_kubelet_resolves():
    refs = {"HF_TOKEN": volcano.SecretKeyRef(secret="hf-credentials", key="token")}
    job = build_volcano_job(a_spec(env={"EPOCHS": "3"}, env_from_secrets=refs))

    assert_valid_job(job)
    for container in containers_of(job):
        assert container["env"][2:] == [
            {"name": "EPOCHS", "value": "3"},
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-credentials", "key": "token"}},
            },
        ]


# --- Refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"job_id": "42"}, "job_id"),
        ({"kind": "batch"}, "kind"),
        ({"namespace": "Team_A"}, "namespace"),
        ({"namespace": "a" * 64}, "namespace"),
        ({"queue": "root"}, "queue"),
        ({"queue": "Team A"}, "queue"),
        ({"image": ""}, "image"),
        ({"image": "img --privileged"}, "image"),
        ({"command": "python train.py"}, "command"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"WITH-DASH": "x"}}, "env"),
        ({"env": {"RANK": "3"}}, "env"),
        ({"env": {"VC_MASTER_HOSTS": "x"}}, "env"),
        ({"env": {"GPUPOOL_JOB_ID": "x"}}, "env"),
        # Refused by submit and, since they are one rule, by the builder too.
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env"),
        ({"env": {"HOSTNAME": "x"}}, "env"),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env"),
        ({"env": {"KUBERNETES_SERVICE_HOST": "x"}}, "env"),
        ({"env": {"rank": "3"}}, "env"),
        ({"env_from_secrets": {"RANK": volcano.SecretKeyRef(secret="s", key="k")}}, "env_from_"),
        ({"env_from_secrets": {"TOKEN": {"secret": "s", "key": "k"}}}, "env_from_secrets"),
        (
            {
                "env": {"A": "1"},
                "env_from_secrets": {"A": volcano.SecretKeyRef(secret="s", key="k")},
            },
            "env_from_secrets",
        ),
        ({"replicas": 0}, "replicas"),
        ({"replicas": MAX_REPLICAS + 1}, "replicas"),
        ({"gpus_per_replica": 0}, "gpus_per_replica"),
        ({"gpu_resource": "gpu"}, "gpu_resource"),
        ({"gpu_resource": "kubernetes.io/gpu"}, "gpu_resource"),
        ({"gpu_resource": "nvidia.com/1 GPU"}, "gpu_resource"),
        ({"gpu_model": ""}, "gpu_model"),
        ({"node_selector": {}}, "node_selector"),
        ({"node_selector": {"gpu type": "a100"}}, "node_selector"),
        ({"node_selector": {"gpu-type": "A100 80GB"}}, "node_selector"),
        ({"node_selector": {}, "node_label_in": {"gpu-type": []}}, "node_label_in"),
        ({"node_label_in": {"gpu-type": "a100"}}, "node_label_in"),
        ({"node_label_in": {"gpu-type": ["A100 80GB"]}}, "node_label_in"),
        ({"cpu_millicores": 0}, "cpu_millicores"),
        ({"memory_mib": 0}, "memory_mib"),
        ({"max_runtime_seconds": 0}, "max_runtime_seconds"),
        ({"max_runtime_seconds": 2**31}, "max_runtime_seconds"),
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"scheduler_name": ""}, "scheduler_name"),
        ({"scheduler_name": "s" * 64}, "scheduler_name"),
        ({"submission_uid": ""}, "submission_uid"),
        ({"portal_url": "javascript:alert(1)"}, "portal_url"),
        ({"priority_class_name": "High"}, "priority_class_name"),
        ({"max_retry": -1}, "max_retry"),
        ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
        ({"tolerations": [{"key": "x"}]}, "tolerations"),
        ({"shm_mib": -1}, "shm_mib"),
        ({"shm_mib": 300000}, "shm_mib"),
        ({"team_slug": ""}, "team_slug"),
        ({"replicas": 2, "replica_hosts": ["a100-0"]}, "replica_hosts"),
        ({"replica_hosts": "a100-0"}, "replica_hosts"),
        ({"replica_hosts": ["bad host"]}, "replica_hosts"),
    ],
)
def test_a_spec_that_cannot_become_a_valid_job_is_refused_naming_the_field(overrides, field):
    with pytest.raises(ManifestError, match=rf"^{field}"):
        a_spec(**overrides)


@pytest.mark.parametrize(
    ("secret", "key"),
    [("HF_Creds", "token"), ("a" * 254, "token"), ("hf", "a/b"), ("hf", ".."), ("hf", "")],
)
def test_an_invalid_secret_reference_is_refused(secret, key):
    with pytest.raises(ManifestError, match=r"^env_from_secrets"):
        volcano.SecretKeyRef(secret=secret, key=key)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"key": "x", "value": "y"}, "tolerations.value"),
        (
            {"key": "x", "effect": "NoSchedule", "toleration_seconds": 5},
            "tolerations.toleration_seconds",
        ),
        ({"key": "", "operator": "Equal", "value": "y"}, "tolerations.key"),
        ({"key": "bad key"}, "tolerations.key"),
        ({"key": "x", "effect": "Sometimes"}, "tolerations.effect"),
    ],
)
def test_invalid_tolerations_are_refused(kwargs, field):
    with pytest.raises(ManifestError, match=rf"^{re.escape(field)}"):
        Toleration(**kwargs)


@pytest.mark.parametrize(
    ("kind", "hosts", "pinned"),
    [
        ("training", ["n0", "n1", "n1", "n2"], {"master": ["n0"], "worker": ["n1", "n2"]}),
        ("training", ["n0"], {"master": ["n0"]}),
        ("inference", ["n0", "n1", "n0"], {"server": ["n0", "n1"]}),
    ],
)
def test_each_task_is_pinned_to_its_own_replicas_hosts(kind, hosts, pinned):
    job = build_volcano_job(a_spec(kind=kind, replicas=len(hosts), replica_hosts=hosts, port=8000))
    assert_valid_job(job)
    found = {}
    for task in job["spec"]["tasks"]:
        (term,) = task["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        (host,) = [e for e in term["matchExpressions"] if e["key"] == "kubernetes.io/hostname"]
        found[task["name"]] = host["values"]
    assert found == pinned


def test_a_valid_spec_can_be_varied_with_replace():
    spec = a_spec()

    assert replace(spec, replicas=16).replicas == 16
    with pytest.raises(ManifestError, match=r"^replicas"):
        replace(spec, replicas=-1)


# --- The strict checker itself ---------------------------------------------------------------


def test_the_strict_checker_reports_an_unknown_field_deep_in_the_pod_spec():
    job = build_volcano_job(a_spec())
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["privilegedd"] = True
    job["spec"]["bogus"] = 1

    problems = schema_errors(job, JOB_VALIDATORS)

    assert any("spec.tasks[0].template.spec.containers[0].privilegedd" in p for p in problems)
    assert any("unknown field spec.bogus" in p for p in problems)


def test_the_strict_checker_reports_duplicate_container_ports():
    job = build_volcano_job(a_spec(kind="inference", port=8000))
    ports = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["ports"]
    ports.append(dict(ports[0], name="again"))

    assert any("duplicate list-map key" in p for p in schema_errors(job, JOB_VALIDATORS))


def test_the_admission_check_reports_what_volcano_refuses():
    job = build_volcano_job(a_spec(replicas=2))
    job["spec"]["tasks"][1]["name"] = "master"
    job["spec"]["policies"].append({"event": "PodFailed", "action": "SyncJob"})
    job["spec"]["plugins"]["horovod"] = []
    job["spec"]["minAvailable"] = 3

    problems = "\n".join(admission_errors(job))

    assert "task master repeats" in problems
    assert "event PodFailed repeats" in problems
    assert "action 'SyncJob' is not allowed" in problems
    assert "unknown plugin horovod" in problems
    assert "minAvailable exceeds the sum" in problems


def test_the_schema_check_rejects_a_bad_quantity():
    job = build_volcano_job(a_spec())
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = (
        "4 cores"
    )

    assert schema_errors(job, JOB_VALIDATORS)


# --- Queues and queue commands ---------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    slug=st.text(min_size=1, max_size=70),
    weight=st.integers(1, 65535),
    capability=st.dictionaries(
        st.sampled_from(
            ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu", "memory", "amd.com/gpu"]
        ),
        st.one_of(
            st.integers(0, 10_000),
            st.sampled_from(["8", "500m", "512Gi", "1.5", "0"]),
        ),
        max_size=5,
    ),
)
def test_every_generated_queue_passes_the_queue_crd_strictly(slug, weight, capability):
    queue = build_volcano_queue(volcano_queue_name(slug), weight, capability)

    problems = schema_errors(queue, QUEUE_VALIDATORS)
    assert not problems, "\n".join(problems)
    assert "namespace" not in queue["metadata"]  # cluster-scoped


def test_a_team_queue_carries_weight_capability_and_the_portal_label():
    queue = build_volcano_queue("gp-vision", 3, {"nvidia.com/gpu": 12})

    assert queue == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "gp-vision", "labels": {LABEL_MANAGED_BY: "gpupool"}},
        "spec": {"weight": 3, "capability": {"nvidia.com/gpu": 12}, "reclaimable": True},
    }


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("root", 1, {}), "queue name"),
        (("default", 1, {}), "queue name"),
        (("Team A", 1, {}), "queue name"),
        (("gp-a", 0, {}), "weight"),
        (("gp-a", 65536, {}), "weight"),
        (("gp-a", True, {}), "weight"),
        (("gp-a", 1, {"nvidia.com/gpu": -1}), "capability"),
        (("gp-a", 1, {"nvidia.com/gpu": "8 GPUs"}), "capability"),
        (("gp-a", 1, {"nvidia.com/gpu": "-8"}), "capability"),
        (("gp-a", 1, {"bad resource": 1}), "capability"),
    ],
)
def test_invalid_queues_are_refused(args, field):
    with pytest.raises(ManifestError, match=rf"^{field}"):
        build_volcano_queue(*args)


def test_closing_a_queue_is_a_command_targeting_it():
    command = build_queue_command(
        queue_name="gp-vision",
        queue_uid="2c4d6e8f-0000-4000-8000-000000000001",
        action="CloseQueue",
        namespace="gpupool-system",
        name="gp-vision-close-1a2b",
    )

    assert command["apiVersion"] == "bus.volcano.sh/v1alpha1"
    assert command["kind"] == "Command"
    assert command["action"] == "CloseQueue"
    assert command["target"] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "name": "gp-vision",
        "uid": "2c4d6e8f-0000-4000-8000-000000000001",
    }
    with pytest.raises(ManifestError, match=r"^action"):
        build_queue_command(
            queue_name="gp-vision", queue_uid="u", action="DeleteQueue", namespace="ns", name="c"
        )


# --- Purity -----------------------------------------------------------------------------------


def imported_top_level_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "rules").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO_ROOT))
)
def test_the_ground_floor_imports_the_standard_library_only(path):
    """The builder and every other rule on the ground floor: the standard library and each
    other, nothing else (the import contract says the same from the graph)."""
    imported = imported_top_level_modules(path) - {"__future__", "rules"}

    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
