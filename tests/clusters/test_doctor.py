"""The cluster doctor's rules on plain node dicts (no cluster, no database): each classic
failure is found, named in plain words with its fix, and a healthy cluster yields nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from clusters.doctor import (
    CatalogFacts,
    DcgmFacts,
    ModelFacts,
    VolcanoFacts,
    check_dcgm,
    check_gpus_advertised,
    check_mig,
    check_model_labels,
    check_volcano,
    diagnose,
)

CATALOG = CatalogFacts(
    [
        ModelFacts("a100-80gb", ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB")),
        ModelFacts(
            "a100-80gb-mig-1g.10gb",
            ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",),
            resource_name="nvidia.com/mig-1g.10gb",
        ),
        ModelFacts(
            "a100-80gb-mig-3g.40gb",
            ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",),
            resource_name="nvidia.com/mig-3g.40gb",
        ),
        ModelFacts("v100-32gb", ("Tesla-V100-SXM2-32GB",)),
        ModelFacts("t4", ("Tesla-T4",)),
        ModelFacts("a100-80gb-shared", (), shared=True),
    ]
)
A100 = "NVIDIA-A100-SXM4-80GB"


def node(
    name: str,
    *,
    label: str | None = "a100-80gb",
    product: str | None = A100,
    gpus: int | None = 8,
    allocatable: int | None = None,
    mig: dict[str, int] | None = None,
    strategy: str | None = None,
    created: dt.datetime | None = None,
    ready: bool | None = None,
    **labels: str,
) -> dict[str, Any]:
    """A node object as the API server returns it (``gpus`` None: no GPU resource at all)."""
    all_labels = {"kubernetes.io/hostname": name, **labels}
    if label is not None:
        all_labels["gpu-type"] = label
    if product is not None:
        all_labels.update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.present": "true"})
    if strategy is not None:
        all_labels["nvidia.com/mig.strategy"] = strategy
    capacity: dict[str, str] = {"cpu": "64", "memory": "512Gi"}
    alloc = dict(capacity)
    if gpus is not None:
        capacity["nvidia.com/gpu"] = str(gpus)
        alloc["nvidia.com/gpu"] = str(gpus if allocatable is None else allocatable)
    for profile, count in (mig or {}).items():
        capacity[f"nvidia.com/mig-{profile}"] = alloc[f"nvidia.com/mig-{profile}"] = str(count)
    out: dict[str, Any] = {
        "metadata": {"name": name, "labels": all_labels},
        "status": {"capacity": capacity, "allocatable": alloc},
    }
    if created is not None:
        out["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    if ready is not None:
        status = "True" if ready else "Unknown"
        out["status"]["conditions"] = [{"type": "Ready", "status": status}]
    return out


def cpu_node(name: str = "cpu-0") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "32"}, "allocatable": {"cpu": "32"}},
    }


def codes(findings) -> list[str]:
    return [f.code for f in findings]


GOOD_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""
ACTIONS = '"enqueue, allocate, backfill"'
VOLCANO_OK = VolcanoFacts(
    served=frozenset({"batch.volcano.sh/v1alpha1", "scheduling.volcano.sh/v1beta1", "v1"}),
    config=GOOD_CONF,
)


def test_a_healthy_cluster_has_nothing_to_report():
    nodes = [
        node("a100-0"),
        node("a100-1"),
        node("t4-0", label="t4", product="Tesla-T4"),
        cpu_node(),
    ]
    dcgm = DcgmFacts(configured=True, hosts=frozenset({"a100-0", "a100-1", "t4-0"}), series=17)
    assert (
        diagnose(nodes=nodes, catalog=CATALOG, gpu_label="gpu-type", volcano=VOLCANO_OK, dcgm=dcgm)
        == []
    )


# (1) GPUs not advertised -----------------------------------------------------------------------
def test_a_gpu_node_whose_device_plugin_is_not_running_is_an_error_naming_it():
    # GFD labelled it (product, gpu.present), but no nvidia.com/gpu in capacity at all.
    nodes = [node("a100-0"), node("a100-1", gpus=None), cpu_node()]
    (finding,) = check_gpus_advertised(nodes, gpu_label="gpu-type")
    assert (finding.code, finding.severity, finding.nodes) == (
        "gpus-not-advertised",
        "error",
        ("a100-1",),
    )
    assert finding.title == "1 GPU node advertises no GPUs: a100-1"
    assert "Insufficient nvidia.com/gpu" in finding.explanation
    assert "device plugin" in finding.fix and "driver" in finding.fix


NOW = dt.datetime(2026, 12, 7, 10, 0, tzinfo=dt.UTC)


def test_a_node_that_just_joined_is_still_starting_not_broken():
    """A scale-up: the new node has GFD's labels at once, its GPUs only once the GPU Operator's
    driver and device plugin run (minutes). That is info, never the error, until the grace."""
    nodes = [
        node("a100-0"),
        node("a100-new", gpus=None, created=NOW - dt.timedelta(minutes=2), ready=True),
        node("a100-old", gpus=None, created=NOW - dt.timedelta(minutes=30), ready=True),
    ]
    findings = check_gpus_advertised(nodes, gpu_label="gpu-type", now=NOW)
    assert codes(findings) == ["gpus-node-starting", "gpus-not-advertised"]
    starting, broken = findings
    assert (starting.severity, starting.nodes) == ("info", ("a100-new",))
    assert "a100-new: joined 2 min ago" in starting.explanation
    assert broken.nodes == ("a100-old",)
    # Past the grace it is the error.
    later = check_gpus_advertised(nodes, gpu_label="gpu-type", now=NOW + dt.timedelta(minutes=9))
    assert [f.nodes for f in later if f.code == "gpus-not-advertised"] == [("a100-new", "a100-old")]


def test_a_notready_node_without_gpus_is_still_starting_however_old():
    nodes = [node("a100-0", gpus=None, created=NOW - dt.timedelta(days=3), ready=False)]
    (finding,) = check_gpus_advertised(nodes, gpu_label="gpu-type", now=NOW)
    assert (finding.code, finding.severity) == ("gpus-node-starting", "info")
    assert "a100-0: NotReady" in finding.explanation


def test_new_and_notready_nodes_are_not_missed_by_dcgm():
    dcgm = DcgmFacts(configured=True, hosts=frozenset({"a100-0"}), series=8)
    nodes = [
        node("a100-0", created=NOW - dt.timedelta(days=1)),
        node("a100-new", created=NOW - dt.timedelta(minutes=3)),
        node("a100-down", ready=False),
        node("a100-silent", created=NOW - dt.timedelta(days=1), ready=True),
    ]
    (finding,) = check_dcgm(dcgm, nodes, gpu_label="gpu-type", now=NOW)
    assert (finding.code, finding.nodes) == ("dcgm-nodes-silent", ("a100-silent",))
    # A cluster whose every GPU node is starting has no exporter to scrape yet: nothing to say.
    fresh = [node("a100-new", created=NOW - dt.timedelta(minutes=3))]
    assert check_dcgm(DcgmFacts(configured=True), fresh, gpu_label="gpu-type", now=NOW) == []
    # Through diagnose, with the grace the checkup passes.
    found = diagnose(
        nodes=[node("a100-new", gpus=None, created=NOW - dt.timedelta(minutes=3))],
        catalog=CATALOG,
        gpu_label="gpu-type",
        dcgm=DcgmFacts(configured=True),
        now=NOW,
        grace=dt.timedelta(minutes=2),
    )
    assert codes(found) == ["gpus-not-advertised", "dcgm-no-data"]


def test_a_node_with_only_the_admins_label_and_no_gpus_is_found_too():
    bare = node("old-0", label="v100-32gb", product=None, gpus=None)
    (finding,) = check_gpus_advertised([bare], gpu_label="gpu-type")
    assert finding.nodes == ("old-0",)


def test_gpus_registered_but_none_allocatable_say_they_are_unhealthy():
    nodes = [node("a100-0", allocatable=0), node("a100-1", allocatable=3)]
    (finding,) = check_gpus_advertised(nodes, gpu_label="gpu-type")
    assert (finding.code, finding.nodes) == ("gpus-all-unhealthy", ("a100-0",))
    assert "unhealthy" in finding.explanation


def test_nodes_without_any_gpu_sign_are_not_gpu_nodes():
    assert check_gpus_advertised([cpu_node(), cpu_node("cpu-1")], gpu_label="gpu-type") == []


# (2) The model label ------------------------------------------------------------------------
def test_a_label_differing_only_in_case_names_the_catalog_spelling_and_the_relabel_command():
    nodes = [node("a100-0"), node("a100-1", label="A100-80GB")]
    findings = check_model_labels(nodes, catalog=CATALOG, gpu_label="gpu-type")
    case = next(f for f in findings if f.code == "model-label-case")
    assert case.severity == "warning" and case.nodes == ("a100-1",) and case.subject == "A100-80GB"
    assert case.title == "gpu-type=A100-80GB differs only in case from the catalog's a100-80gb"
    assert "case-sensitive" in case.explanation
    assert case.fix == "Relabel them with the catalog's spelling: kubectl label node a100-1 " \
        "gpu-type=a100-80gb --overwrite"  # fmt: skip
    # ... and the model is now split across two values
    split = next(f for f in findings if f.code == "model-label-split")
    assert split.nodes == ("a100-0", "a100-1") and "A100-80GB on 1 node" in split.explanation


def test_two_spellings_of_a_value_the_catalog_does_not_know_keep_the_majority_one():
    nodes = [
        node("x-0", label="a100", product=None),
        node("x-1", label="a100", product=None),
        node("x-2", label="A100", product=None),
    ]
    findings = check_model_labels(nodes, catalog=CATALOG, gpu_label="gpu-type")
    (case,) = [f for f in findings if f.code == "model-label-case"]
    assert case.title == "gpu-type=A100 differs only in case from a100 on other nodes"
    assert case.nodes == ("x-2",) and "gpu-type=a100 --overwrite" in case.fix
    assert sorted(f.subject for f in findings if f.code == "model-label-unknown") == [
        "A100",
        "a100",
    ]


def test_an_unknown_label_on_a_known_product_suggests_the_catalog_key():
    nodes = [node("a100-0"), node("a100-1", label="a100")]  # the guide's gpu-type=a100
    findings = check_model_labels(nodes, catalog=CATALOG, gpu_label="gpu-type")
    assert codes(findings) == ["model-label-unknown", "model-label-split"]
    unknown = findings[0]
    assert unknown.title == "gpu-type=a100 is not a GPU model the catalog knows"
    assert "recognises them by nvidia.com/gpu.product as a100-80gb" in unknown.explanation
    assert "gpu-type=a100-80gb --overwrite" in unknown.fix


def test_an_unknown_label_on_an_unknown_product_is_not_scheduled():
    nodes = [node("b300-0", label="b300", product="NVIDIA-B300-SXM6-288GB", gpus=2)]
    (finding,) = check_model_labels(nodes, catalog=CATALOG, gpu_label="gpu-type")
    assert finding.code == "model-label-unknown"
    assert "no job is placed on them" in finding.explanation
    assert "NVIDIA-B300-SXM6-288GB" in finding.explanation


def test_a_missing_label_is_a_warning_only_when_no_product_names_the_model():
    nodes = [
        node("a100-0", label=None),  # GFD's product still names it
        node("x-0", label=None, product="Some-New-GPU"),
    ]
    findings = check_model_labels(nodes, catalog=CATALOG, gpu_label="gpu-type")
    by_code = {f.code: f for f in findings}
    assert by_code["model-label-missing"].nodes == ("x-0",)
    assert by_code["model-label-missing"].severity == "warning"
    assert by_code["model-label-missing-gfd"].nodes == ("a100-0",)
    assert by_code["model-label-missing-gfd"].severity == "info"


def test_the_clusters_own_label_name_is_the_one_checked():
    nodes = [node("a100-0", label=None, **{"example.org/gpu": "A100-80GB"})]
    findings = check_model_labels(nodes, catalog=CATALOG, gpu_label="example.org/gpu")
    assert codes(findings) == ["model-label-case"]
    assert "example.org/gpu=a100-80gb" in findings[0].fix


# (3) MIG -------------------------------------------------------------------------------------
def test_mig_slices_beside_whole_cards_on_one_node_are_a_warning():
    nodes = [
        node("a100-0"),
        node("a100-mig-0", gpus=4, mig={"1g.10gb": 14, "3g.40gb": 4}, strategy="mixed"),
    ]
    findings = check_mig(nodes, catalog=CATALOG, gpu_label="gpu-type")
    (finding,) = [f for f in findings if f.code == "mig-and-whole-gpus"]
    assert finding.severity == "warning" and finding.nodes == ("a100-mig-0",)
    assert "nvidia.com/mig.config" in finding.fix
    assert codes(findings) == ["mig-and-whole-gpus"]  # the slices are in the catalog


def test_a_fully_partitioned_node_is_fine():
    nodes = [node("mig-0", gpus=0, mig={"1g.10gb": 56}, strategy="mixed")]
    assert check_mig(nodes, catalog=CATALOG, gpu_label="gpu-type") == []


def test_a_mig_single_node_with_a_catalogued_slice_is_fine():
    single = node("s-0", product=f"{A100}-MIG-1g.10gb", gpus=56, strategy="single")
    assert check_mig([single], catalog=CATALOG, gpu_label="gpu-type") == []
    assert check_model_labels([single], catalog=CATALOG, gpu_label="gpu-type") == []


def test_slices_the_catalog_has_no_model_for_are_named_by_profile():
    nodes = [
        node("m-0", gpus=0, mig={"2g.20gb": 21}, strategy="mixed"),
        node("s-0", product=f"{A100}-MIG-7g.80gb", gpus=8, strategy="single"),
    ]
    findings = check_mig(nodes, catalog=CATALOG, gpu_label="gpu-type")
    unknown = {f.subject: f for f in findings if f.code == "mig-profile-unknown"}
    assert unknown["2g.20gb"].nodes == ("m-0",)
    assert unknown["7g.80gb"].nodes == ("s-0",)
    assert "never scheduled" in unknown["2g.20gb"].explanation


def test_a_strategy_label_that_contradicts_the_resources_and_strategies_that_differ():
    nodes = [
        node("m-0", gpus=0, mig={"1g.10gb": 56}, strategy="single"),  # single never has mig-*
        node("m-1", gpus=0, mig={"1g.10gb": 56}, strategy="mixed"),
    ]
    findings = check_mig(nodes, catalog=CATALOG, gpu_label="gpu-type")
    assert codes(findings) == ["mig-strategy-contradicts", "mig-strategies-differ"]
    assert findings[0].nodes == ("m-0",)
    assert "single on 1 node" in findings[1].explanation


def test_a_strategy_that_is_no_strategy():
    findings = check_mig([node("a-0", strategy="mixd")], catalog=CATALOG, gpu_label="gpu-type")
    assert codes(findings) == ["mig-strategy-unknown"] and findings[0].subject == "mixd"


# (4) Volcano ---------------------------------------------------------------------------------
def test_volcano_not_installed_is_an_error_and_nothing_else_is_said():
    (finding,) = check_volcano(VolcanoFacts(served=frozenset({"v1", "apps/v1"})))
    assert (finding.code, finding.severity) == ("volcano-missing", "error")
    assert "batch.volcano.sh/v1alpha1" in finding.explanation and "helm install" in finding.fix


def test_a_missing_scheduler_configmap_is_a_warning_that_it_cannot_be_seen():
    (finding,) = check_volcano(
        VolcanoFacts(served=VOLCANO_OK.served, config=None, config_problem="not-found")
    )
    assert (finding.code, finding.severity) == ("volcano-config-unseen", "warning")
    assert finding.title == "Cannot see the Volcano scheduler configuration"
    assert "volcano-system/volcano-scheduler-configmap" in finding.explanation


def test_a_scheduler_configmap_the_portal_may_not_read_is_only_said():
    (finding,) = check_volcano(
        VolcanoFacts(served=VOLCANO_OK.served, config=None, config_problem="forbidden")
    )
    assert (finding.code, finding.severity) == ("volcano-config-forbidden", "info")
    assert "--resource-name=volcano-scheduler-configmap" in finding.fix


@pytest.mark.parametrize(
    ("change", "code", "severity"),
    [
        (("  - name: gang\n", ""), "volcano-no-gang", "error"),
        (("  - name: predicates\n", ""), "volcano-no-predicates", "error"),
        ((ACTIONS, '"enqueue, backfill"'), "volcano-no-allocate", "error"),
        ((ACTIONS, '"allocate, backfill"'), "volcano-no-enqueue", "warning"),
        (("  - name: proportion\n", ""), "volcano-no-queue-limits", "warning"),
        (
            ("  - name: predicates\n", "  - name: predicates\n    arguments:\n"
             "      predicate.NodeAffinityEnable: false\n"),
            "volcano-no-node-affinity",
            "error",
        ),
        (("tiers:", "tiers: [oops"), "volcano-config-invalid", "error"),
    ],
    ids=[
        "no gang: half a gang can start",
        "no predicates: selectors ignored",
        "no allocate: nothing is bound",
        "no enqueue",
        "no proportion or capacity: queue capability not enforced",
        "predicates without node affinity",
        "YAML that does not parse",
    ],
)  # fmt: skip
def test_a_scheduler_config_lacking_what_the_portals_jobs_need(change, code, severity):
    conf = GOOD_CONF.replace(*change)
    assert conf != GOOD_CONF
    (finding,) = check_volcano(VolcanoFacts(served=VOLCANO_OK.served, config=conf))
    assert (finding.code, finding.severity) == (code, severity)
    assert finding.fix


def test_capacity_instead_of_proportion_is_fine():
    conf = GOOD_CONF.replace("name: proportion", "name: capacity")
    assert check_volcano(VolcanoFacts(served=VOLCANO_OK.served, config=conf)) == []


# (5) DCGM ------------------------------------------------------------------------------------
def test_no_prometheus_url_means_no_dcgm_finding():
    assert check_dcgm(None, [node("a100-0")], gpu_label="gpu-type") == []
    assert check_dcgm(DcgmFacts(configured=False), [node("a100-0")], gpu_label="gpu-type") == []


def test_a_prometheus_without_dcgm_series_is_a_warning():
    (finding,) = check_dcgm(DcgmFacts(configured=True), [node("a100-0")], gpu_label="gpu-type")
    assert (finding.code, finding.severity, finding.nodes) == (
        "dcgm-no-data",
        "warning",
        ("a100-0",),
    )
    assert "DCGM exporter" in finding.explanation


def test_gpu_nodes_missing_from_the_dcgm_series_are_named():
    dcgm = DcgmFacts(configured=True, hosts=frozenset({"a100-0"}), series=8)
    nodes = [node("a100-0"), node("a100-1"), cpu_node()]
    (finding,) = check_dcgm(dcgm, nodes, gpu_label="gpu-type")
    assert (finding.code, finding.nodes) == ("dcgm-nodes-silent", ("a100-1",))


def test_a_prometheus_that_does_not_answer_says_so_and_keeps_its_error_for_the_admins():
    error = "cannot reach http://prom.internal:9090 (10.0.3.7): connection refused"
    dcgm = DcgmFacts(configured=True, error=error)
    (finding,) = check_dcgm(dcgm, [node("a100-0")], gpu_label="gpu-type")
    assert finding.code == "dcgm-prometheus-unreadable"
    assert "failed" in finding.explanation
    # The host, address and Prometheus's words are the admins' detail, not everyone's text.
    assert finding.detail == error and finding.as_dict()["detail"] == error
    for secret in ("prom.internal", "10.0.3.7", "refused"):
        assert secret not in finding.explanation + finding.title + finding.fix


def test_a_scheduler_configmap_read_error_keeps_the_api_servers_words_for_the_admins():
    error = 'Get "https://10.96.0.1:443/api/v1/…": dial tcp 10.96.0.1:443: i/o timeout'
    (finding,) = check_volcano(
        VolcanoFacts(served=VOLCANO_OK.served, config=None, config_problem=error)
    )
    assert finding.code == "volcano-config-unseen" and finding.detail == error
    assert "10.96.0.1" not in finding.explanation + finding.title + finding.fix
    # The portal's own words stay in the explanation: nothing there to hide.
    (missing,) = check_volcano(
        VolcanoFacts(served=VOLCANO_OK.served, config=None, config_problem="no-key")
    )
    assert "has no such key" in missing.explanation and not missing.detail


# All together --------------------------------------------------------------------------------
def test_findings_come_most_serious_first_with_stable_keys():
    nodes = [node("a100-0", gpus=None), node("a100-1", label="A100-80GB"), node("a100-2")]
    findings = diagnose(
        nodes=nodes,
        catalog=CATALOG,
        gpu_label="gpu-type",
        volcano=VolcanoFacts(served=VOLCANO_OK.served, config=None, config_problem="not-found"),
    )
    assert [f.severity for f in findings] == ["error", "warning", "warning", "warning"]
    assert [f.key for f in findings] == [
        "gpus-not-advertised",
        "model-label-case:A100-80GB",
        "model-label-split:a100-80gb",
        "volcano-config-unseen",
    ]
