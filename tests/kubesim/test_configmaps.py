"""ConfigMaps, and Volcano's scheduler configuration read from one, through the official client."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

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
