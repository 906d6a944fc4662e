"""From job, cluster and inventory rows to a Volcano Job: ``clusters.manifests.job_manifest``.

``test_volcano_manifest`` drives the pure builder over its whole input space; this module
drives the step before it, which fills the builder's input from the database: the cluster's
namespace, scheduler and security options, the GPU resource and node selector read off the
inventory's Node rows. Every manifest must pass the CRD schemas strictly and Volcano's
admission rules, and its pods must be able to land on the nodes the scheduler planned, and on
no node of another model that offers the same GPU resource.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusters.manifests import job_manifest
from clusters.models import Cluster, Node
from portal.models import JobState
from rules import jobspec, volcano
from scheduling.models import GpuModel
from tests.builders import admitted_job, gpu_node
from tests.clusters.test_volcano_manifest import assert_valid_job, containers_of
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

NVIDIA_PRODUCT = "nvidia.com/gpu.product"
AMD_PRODUCT = "amd.com/gpu.product-name"

# What GPU Feature Discovery (or AMD's labeller) writes on a node of each model. A MIG slice
# of the mixed strategy lives on a node whose product is the whole card.
PRODUCTS = {
    "a100-80gb": (NVIDIA_PRODUCT, "NVIDIA-A100-SXM4-80GB"),
    "h100-sxm": (NVIDIA_PRODUCT, "NVIDIA-H100-80GB-HBM3"),
    "t4": (NVIDIA_PRODUCT, "Tesla-T4"),
    "a100-80gb-mig-1g.10gb": (NVIDIA_PRODUCT, "NVIDIA-A100-SXM4-80GB"),
    "mi300x": (AMD_PRODUCT, "AMD_Instinct_MI300X_OAM"),
}
LABEL_MODES = (
    "cluster label",  # every node carries the cluster's label with the model's key
    "GFD only",  # nodes carry only GFD's product (the cluster's label is not used there)
    "cluster label differs",  # the cluster's label varies between the nodes: GFD decides
    "no inventory",  # the model's rows are gone (a sync since admission): the cluster label
)

_names = itertools.count()


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    model = draw(st.sampled_from(sorted(PRODUCTS)))
    kind = draw(st.sampled_from(["training", "inference"]))
    return {
        "model": model,
        "other": draw(st.sampled_from(sorted(set(PRODUCTS) - {model}))),
        "mode": draw(st.sampled_from(LABEL_MODES)),
        "nodes": draw(st.integers(1, 4)),
        "cluster": {
            "gpu_label": draw(
                st.sampled_from(["gpu-type", "example.com/gpu-model", "cloud.example/accelerator"])
            ),
            "namespace": draw(st.sampled_from(["gpupool", "ml-jobs"])),
            "namespace_per_team": draw(st.booleans()),
            "scheduler_name": draw(st.sampled_from(["volcano", "volcano-gpu"])),
            "tolerate_gpu_taint": draw(st.booleans()),
            "run_as_non_root": draw(st.booleans()),
            "mount_service_account_token": draw(st.booleans()),
        },
        "team": draw(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?", fullmatch=True)),
        "job": {
            "kind": kind,
            "replicas": draw(st.integers(1, 6)),
            "gpus_per_replica": draw(st.integers(1, 8)),
            "cpu_millicores": draw(st.integers(100, 128_000)),
            "memory_mib": draw(st.integers(128, 1024 * 1024)),
            "max_runtime_seconds": draw(st.integers(60, 14 * 24 * 3600)),
            "env": draw(
                st.dictionaries(
                    st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True).filter(
                        lambda n: jobspec.env_name_refusal(n) is None
                    ),
                    st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=20),
                    max_size=3,
                )
            ),
            "port": draw(st.integers(1024, 65535)) if kind == "inference" else None,
        },
        "plan_seed": draw(st.randoms(use_true_random=False)),
    }


def _labels(model: str, mode: str, gpu_label: str, index: int) -> dict[str, str]:
    product_key, product = PRODUCTS[model]
    labels = {"kubernetes.io/hostname": f"{model}-{index}", product_key: product}
    if mode == "cluster label":
        labels[gpu_label] = model
    elif mode == "cluster label differs":
        labels[gpu_label] = f"{model}-rack{index % 2}"
    return labels


def _add_nodes(cluster: Cluster, model: GpuModel, labels: list[dict[str, str]]) -> list[Node]:
    return [
        gpu_node(
            cluster,
            node_labels["kubernetes.io/hostname"],
            model.key,
            8,
            gpu_product=PRODUCTS[model.key][1],
            labels=node_labels,
        )
        for node_labels in labels
    ]


def _selects(pod: dict[str, Any], node: Node) -> bool:
    """What the Kubernetes scheduler checks of a node's labels: the nodeSelector, and every
    ``In`` expression of the required node affinity."""
    affinity = pod.get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{"matchExpressions": []}]
    assert all(e["operator"] == "In" for t in terms for e in t["matchExpressions"])
    return all(node.labels.get(k) == v for k, v in pod.get("nodeSelector", {}).items()) and any(
        all(node.labels.get(e["key"]) in e["values"] for e in term["matchExpressions"])
        for term in terms
    )


def _task_plan(task: str, plan: list[str]) -> list[str]:
    """The planned nodes of a task's replicas: the master is replica 0, the workers the rest,
    an inference server all of them."""
    return {volcano.TASK_MASTER: plan[:1], volcano.TASK_WORKER: plan[1:]}.get(task, plan)


def _expected_selector(
    case: dict[str, Any], model: GpuModel, planned: list[Node]
) -> dict[str, str]:
    """The cluster's label when the planned nodes agree on it, else GFD's product."""
    gpu_label = case["cluster"]["gpu_label"]
    if case["mode"] in ("cluster label", "no inventory"):
        return {gpu_label: model.key}
    racks = {n.labels[gpu_label] for n in planned} if case["mode"] != "GFD only" else set()
    if len(racks) == 1:  # the gang landed on one rack: its value selects them all
        return {gpu_label: racks.pop()}
    product_key, product = PRODUCTS[model.key]
    return {product_key: product}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_every_admitted_job_becomes_a_valid_manifest_for_its_nodes(catalog, case):
    with transaction.atomic():
        _check(case)
        transaction.set_rollback(True)  # each example starts from the same database


def _check(case: dict[str, Any]) -> None:
    options = case["cluster"]
    cluster = Cluster.objects.create(name=f"c{next(_names)}", api_url="https://k8s.test", **options)
    model = GpuModel.objects.get(key=case["model"])
    other = GpuModel.objects.get(key=case["other"])
    gpu_label = options["gpu_label"]
    nodes = []
    if case["mode"] != "no inventory":
        labels = [_labels(model.key, case["mode"], gpu_label, i) for i in range(case["nodes"])]
        nodes = _add_nodes(cluster, model, labels)
    # Nodes of another model on the same cluster, labelled the usual way.
    others = _add_nodes(cluster, other, [_labels(other.key, "cluster label", gpu_label, 0)])
    names = [n.name for n in nodes] or [f"{model.key}-gone"]
    plan = [case["plan_seed"].choice(names) for _ in range(case["job"]["replicas"])]
    team = TeamFactory(slug=case["team"], name=case["team"])
    job = JobFactory(
        team=team,
        owner=UserFactory(username="dispatcher"),
        state=JobState.ADMITTED,
        admitted_at=timezone.now(),
        cluster=cluster,
        gpu_model=model,
        node_plan=plan,
        **case["job"],
    )

    namespace, manifest = job_manifest(job)

    assert_valid_job(manifest)
    if options["namespace_per_team"]:
        assert namespace == volcano.team_namespace_name(team.slug)
    else:
        assert namespace == options["namespace"]
    assert manifest["metadata"]["namespace"] == namespace
    spec = manifest["spec"]
    assert spec["queue"] == volcano.volcano_queue_name(team.slug)
    assert spec["schedulerName"] == options["scheduler_name"]
    assert spec["minAvailable"] == job.replicas
    assert manifest["metadata"]["labels"][volcano.LABEL_JOB_ID] == str(job.public_id)
    for task in spec["tasks"]:
        pod = task["template"]["spec"]
        assert task["template"]["metadata"]["labels"][volcano.LABEL_JOB_ID] == str(job.public_id)

        # Placement: the model's label as the nodes carry it...
        selector = pod["nodeSelector"]
        planned = [n for n in nodes if n.name in plan]
        assert selector == _expected_selector(case, model, planned)
        # ...and each task pinned to its own replicas' planned nodes, where the cycle
        # reserved their GPUs, and nowhere else.
        mine = _task_plan(task["name"], plan)
        assert all(_selects(pod, n) for n in nodes if n.name in mine), (pod, mine)
        assert not any(_selects(pod, n) for n in nodes if n.name not in mine), (pod, mine)
        rivals = [n for n in others if n.gpu_resource == model.resource_name]
        assert not any(_selects(pod, n) for n in rivals), (selector, rivals)

        # Security: only what the cluster's admin allowed.
        assert pod["automountServiceAccountToken"] is options["mount_service_account_token"]
        assert pod["securityContext"].get("runAsNonRoot", False) is options["run_as_non_root"]
        assert pod["hostNetwork"] is False and pod["hostPID"] is False

        # The GPU taint: tolerated, whatever its effect, only where the cluster says so.
        if options["tolerate_gpu_taint"]:
            assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        else:
            assert "tolerations" not in pod
    for container in containers_of(manifest):
        context = container["securityContext"]
        assert context.get("runAsNonRoot", False) is options["run_as_non_root"]
        assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
        limits = container["resources"]["limits"]
        assert limits[model.resource_name] == job.gpus_per_replica
        assert {k for k in limits if "gpu" in k or "mig" in k} == {model.resource_name}


# ---------------------------------------------------------------------------------------------
# Nodes the plain label cannot tell apart: MIG-single slices still labelled with their card,
# and one product spelled two ways across a driver upgrade.
# ---------------------------------------------------------------------------------------------
def _admitted(cluster: Cluster, model: str, plan: list[str]) -> Any:
    return admitted_job(
        cluster=cluster,
        model=model,
        plan=plan,
        team=TeamFactory(slug="vision", name="Vision"),
        owner=UserFactory(username="dispatcher"),
    )


def test_a_job_on_mig_single_slices_cannot_land_on_whole_gpus(register):
    from clusters.inventory import inventory_sync
    from kubesim import KubeSim

    config = {
        "name": "mig-single",
        "namespaces": ["gpupool"],
        "nodePools": [
            {"name": "a100", "count": 1, "gpuModel": "a100-80gb", "gpus": 8},
            {"name": "a100-sliced", "count": 1, "gpuModel": "a100-80gb", "gpus": 28,
             "product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
             "labels": {"nvidia.com/mig.strategy": "single"}},
        ],
    }  # fmt: skip
    with KubeSim(config, clock_speed=0) as sim:
        cluster = register(sim)
        assert inventory_sync(cluster=cluster).ok
    sliced = Node.objects.get(cluster=cluster, name="a100-sliced-0")
    whole = Node.objects.get(cluster=cluster, name="a100-0")
    assert sliced.gpu_model.key == "a100-80gb-mig-1g.10gb"
    assert sliced.gpu_resource == whole.gpu_resource == "nvidia.com/gpu"

    _, manifest = job_manifest(_admitted(cluster, "a100-80gb-mig-1g.10gb", ["a100-sliced-0"]))

    pod = manifest["spec"]["tasks"][0]["template"]["spec"]
    assert _selects(pod, sliced)
    assert not _selects(pod, whole), f"{pod['nodeSelector']} also selects the whole A100s"


def test_a_gang_across_both_spellings_of_a_product_can_still_be_placed(catalog):
    cluster = Cluster.objects.create(name="rolling", api_url="https://k8s.test")
    model = GpuModel.objects.get(key="a100-80gb")
    assert {"NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"} <= set(model.product_labels)
    nodes = _add_nodes(
        cluster,
        model,
        [
            {"kubernetes.io/hostname": "a100-80gb-0", NVIDIA_PRODUCT: "NVIDIA-A100-SXM4-80GB"},
            {"kubernetes.io/hostname": "a100-80gb-1", NVIDIA_PRODUCT: "A100-SXM4-80GB"},
        ],
    )

    _, manifest = job_manifest(_admitted(cluster, "a100-80gb", ["a100-80gb-0", "a100-80gb-1"]))

    for task, node in zip(manifest["spec"]["tasks"], nodes, strict=True):
        pod = task["template"]["spec"]
        assert _selects(pod, node), f"{pod} does not select its replica's planned node"
        assert "nodeSelector" not in pod
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [
            {  # pinned to the replica's planned node
                "key": "kubernetes.io/hostname",
                "operator": "In",
                "values": [node.labels["kubernetes.io/hostname"]],
            },
            {
                "key": NVIDIA_PRODUCT,
                "operator": "In",
                "values": ["A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"],
            },
        ]


def test_nodes_no_label_tells_apart_are_named_by_hostname(catalog):
    """Whole A100s without GFD labels and MIG-single A100s share ``gpu-type=a100-80gb``, the
    only label the whole ones carry: neither job may use it, so each names its own nodes."""
    cluster = Cluster.objects.create(name="shared-label", api_url="https://k8s.test")
    whole_model = GpuModel.objects.get(key="a100-80gb")
    slice_model = GpuModel.objects.get(key="a100-80gb-mig-1g.10gb")
    whole = _add_nodes(
        cluster, whole_model, [{"kubernetes.io/hostname": "whole-0", "gpu-type": "a100-80gb"}]
    )
    sliced = [
        Node.objects.create(
            cluster=cluster, name="sliced-0", gpu_model=slice_model,
            gpu_product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", gpu_resource="nvidia.com/gpu",
            gpu_capacity=28, gpu_allocatable=28, last_seen_at=timezone.now(),
            labels={"kubernetes.io/hostname": "sliced-0", "gpu-type": "a100-80gb",
                    NVIDIA_PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
        )
    ]  # fmt: skip

    _, whole_job = job_manifest(_admitted(cluster, "a100-80gb", ["whole-0"]))
    pod = whole_job["spec"]["tasks"][0]["template"]["spec"]
    assert _selects(pod, whole[0]) and not _selects(pod, sliced[0]), pod
    assert "nodeSelector" not in pod
    assert_valid_job(whole_job)

    _, slice_job = job_manifest(_admitted(cluster, "a100-80gb-mig-1g.10gb", ["sliced-0"]))
    pod = slice_job["spec"]["tasks"][0]["template"]["spec"]
    assert _selects(pod, sliced[0]) and not _selects(pod, whole[0]), pod
    assert pod["nodeSelector"] == {NVIDIA_PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}


def test_a_node_added_after_the_cache_was_filled_is_found(catalog):
    """The cycle may plan on a node an inventory sync added seconds ago; the dispatch reads
    the inventory again rather than fall back to a label no node carries."""
    cluster = Cluster.objects.create(name="growing", api_url="https://k8s.test")
    model = GpuModel.objects.get(key="a100-80gb")
    product = {NVIDIA_PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    _add_nodes(cluster, model, [{"kubernetes.io/hostname": "old-0", **product}])
    job_manifest(_admitted(cluster, "a100-80gb", ["old-0"]))  # fills this process's cache
    (new,) = _add_nodes(cluster, model, [{"kubernetes.io/hostname": "new-0", **product}])
    Node.objects.filter(name="old-0").delete()  # the cache would still say it is the only one

    _, manifest = job_manifest(_admitted(cluster, "a100-80gb", ["new-0"]))
    pod = manifest["spec"]["tasks"][0]["template"]["spec"]
    assert _selects(pod, new), pod
