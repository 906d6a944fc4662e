"""ConfigMaps, and Volcano's scheduler configuration read from one, through the official client."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.kubesim.builders import create_job, vcjob

CONF = "volcano-scheduler.conf"


def test_volcano_scheduler_configmap_is_installed_with_volcanos_default(core):
    cm = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
    conf = yaml.safe_load(cm.data[CONF])
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    plugins = [[p["name"] for p in tier["plugins"]] for tier in conf["tiers"]]
    assert plugins[0] == ["priority", "gang", "conformance"]
    assert {"drf", "predicates", "proportion", "nodeorder", "binpack"} <= set(plugins[1])


def test_configmap_create_read_update_patch_list_delete(core):
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="settings", labels={"app": "trainer"}),
        data={"lr": "0.1", "epochs": "3"},
    )
    created = core.create_namespaced_config_map("team-a", body)
    assert created.data == {"lr": "0.1", "epochs": "3"}
    assert created.metadata.uid and created.metadata.resource_version

    core.patch_namespaced_config_map("settings", "team-a", {"data": {"lr": "0.2"}})
    assert core.read_namespaced_config_map("settings", "team-a").data["lr"] == "0.2"

    current = core.read_namespaced_config_map("settings", "team-a")
    current.data = {"only": "this"}
    core.replace_namespaced_config_map("settings", "team-a", current)
    assert core.read_namespaced_config_map("settings", "team-a").data == {"only": "this"}

    listed = core.list_namespaced_config_map("team-a", label_selector="app=trainer").items
    assert [c.metadata.name for c in listed] == ["settings"]
    everywhere = {c.metadata.name for c in core.list_config_map_for_all_namespaces().items}
    assert {"settings", "volcano-scheduler-configmap"} <= everywhere

    core.delete_namespaced_config_map("settings", "team-a")
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("settings", "team-a")
    assert err.value.status == 404


def test_bad_configmap_key_is_rejected_naming_the_field(core):
    body = {"metadata": {"name": "bad"}, "data": {"no spaces": "x"}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("team-a", body)
    assert err.value.status == 422
    assert "data[no spaces]" in err.value.body


def test_immutable_configmap_keeps_its_data(core):
    core.create_namespaced_config_map(
        "team-a", {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}
    )
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("frozen", "team-a", {"data": {"a": "2"}})
    assert err.value.status == 422
    assert "field is immutable when `immutable` is set" in err.value.body


def test_configmaps_can_be_watched(core):
    core.create_namespaced_config_map("team-b", {"metadata": {"name": "w"}, "data": {"k": "v"}})
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, "team-b", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        break
    assert seen == [("ADDED", "w")]


# -- Volcano reads its configuration ------------------------------------------------------------

WITHOUT = """\
actions: "{actions}"
tiers:
- plugins:
{first}
- plugins:
{second}
"""


def conf_without(*missing: str, actions: str = "enqueue, allocate, backfill") -> str:
    """Volcano's default configuration less the named plugins."""
    first = [p for p in ("priority", "gang", "conformance") if p not in missing]
    second = [
        p
        for p in ("overcommit", "drf", "predicates", "proportion", "nodeorder", "binpack")
        if p not in missing
    ]
    return WITHOUT.format(
        actions=actions,
        first="\n".join(f"  - name: {p}" for p in first),
        second="\n".join(f"  - name: {p}" for p in second),
    )


def set_conf(sim, core, text: str) -> None:
    core.patch_namespaced_config_map(
        "volcano-scheduler-configmap", "volcano-system", {"data": {CONF: text}}
    )
    sim.settle()


def pods_of(core, job: str, namespace: str = "team-b") -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items


def test_without_predicates_a_node_selector_is_not_honoured(sim, core, custom):
    create_job(
        custom,
        vcjob("picky", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    (pod,) = pods_of(core, "picky")
    assert pod.spec.node_name is None
    assert "didn't match Pod's node affinity/selector" in pod.status.conditions[0].message

    set_conf(sim, core, conf_without("predicates"))
    (pod,) = pods_of(core, "picky")
    assert pod.spec.node_name == "a100-0"  # no node is labelled h100, it landed anyway


def test_predicates_with_node_affinity_disabled_ignore_the_selector(sim, core, custom):
    text = conf_without().replace(
        "  - name: predicates",
        "  - name: predicates\n    arguments:\n      predicate.NodeAffinityEnable: false",
    )
    set_conf(sim, core, text)
    create_job(
        custom,
        vcjob("picky", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    (pod,) = pods_of(core, "picky")
    assert pod.spec.node_name is not None


def test_without_gang_a_job_starts_the_pods_that_fit(sim, core, custom):
    create_job(custom, vcjob("blocker", namespace="team-b", queue="team-b", gpus=1))
    create_job(custom, vcjob("wide", namespace="team-b", queue="team-b", replicas=4, gpus=3))
    sim.settle()
    assert [p.spec.node_name for p in pods_of(core, "wide")] == [None] * 4  # all or nothing

    set_conf(sim, core, conf_without("gang"))
    bound = [p.spec.node_name for p in pods_of(core, "wide") if p.spec.node_name]
    assert len(bound) == 3  # three fit, the fourth waits: no gang to hold them back


def test_without_proportion_a_queue_capability_is_not_enforced(sim, core, custom):
    # team-a's queue has capability nvidia.com/gpu: 8
    create_job(custom, vcjob("big", replicas=3, gpus=4, min_available=3))
    sim.settle()
    assert all(p.spec.node_name is None for p in pods_of(core, "big", "team-a"))

    set_conf(sim, core, conf_without("proportion", "overcommit"))
    assert all(p.spec.node_name for p in pods_of(core, "big", "team-a"))


def test_without_binpack_pods_spread_across_nodes(sim, core, custom):
    create_job(custom, vcjob("packed", namespace="team-b", queue="team-b", replicas=3, gpus=1))
    sim.settle()
    assert {p.spec.node_name for p in pods_of(core, "packed")} == {"a100-0"}

    set_conf(sim, core, conf_without("binpack"))
    create_job(custom, vcjob("spread", namespace="team-b", queue="team-b", replicas=2, gpus=1))
    sim.settle()
    assert {p.spec.node_name for p in pods_of(core, "spread")} == {"a100-1", "a100-2"}


def test_without_the_allocate_action_nothing_is_bound(sim, core, custom):
    set_conf(sim, core, conf_without(actions="enqueue, backfill"))
    create_job(custom, vcjob("stuck", namespace="team-b", queue="team-b"))
    sim.settle()
    assert [p.spec.node_name for p in pods_of(core, "stuck")] == [None]

    set_conf(sim, core, conf_without())
    assert [p.spec.node_name for p in pods_of(core, "stuck")] == ["a100-0"]


def test_a_broken_configuration_is_refused_and_the_previous_one_kept(sim, core, custom):
    set_conf(sim, core, conf_without("predicates"))
    set_conf(sim, core, 'actions: "enqueue, allocate, dance"\ntiers: []\n')
    assert sim.sim.volcano_conf_error == "failed to find Action dance, ignore it"
    create_job(
        custom,
        vcjob("picky", namespace="team-b", queue="team-b", node_selector={"gpu-type": "h100"}),
    )
    sim.settle()
    (pod,) = pods_of(core, "picky")
    assert pod.spec.node_name is not None  # still the configuration without predicates
