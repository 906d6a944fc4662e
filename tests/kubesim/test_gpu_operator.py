"""The GPU Operator's pods and what ``nvidia-smi`` prints in a container: the GPUs it was given."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.kubesim.builders import create_job, vcjob
from tests.kubesim.conftest import raw

MIG_NODE: dict[str, Any] = {
    "name": "mig",
    "simulation": {"podStartupSeconds": 1, "podTerminationSeconds": 1},
    "namespaces": ["team-a"],
    "queues": [{"name": "team-a"}],
    "nodePools": [
        {
            "name": "a100-mig",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 8,
            "mig": {"gpus": 4, "profiles": {"1g.10gb": 14, "3g.40gb": 4}},
        }
    ],
}


def smi_job(
    name: str, *, gpus: int = 1, resource: str = "nvidia.com/gpu", args: list[str] | None = None
) -> dict:
    return vcjob(
        name,
        gpus=gpus,
        gpu_resource=resource,
        duration=None,
        command=["nvidia-smi", *(args if args is not None else ["-L"])],
    )


def logs(core, job: str) -> str:
    return core.read_namespaced_pod_log(f"{job}-worker-0", "team-a")


def test_each_gpu_node_runs_a_device_plugin_and_a_dcgm_exporter(core):
    pods = core.list_namespaced_pod("gpu-operator").items
    by_app: dict[str, set[str]] = {}
    for pod in pods:
        by_app.setdefault(pod.metadata.labels["app"], set()).add(pod.spec.node_name)
        assert pod.status.phase == "Running"
        assert pod.status.container_statuses[0].ready
    assert by_app == {
        "nvidia-device-plugin-daemonset": {"a100-0", "a100-1", "a100-2"},
        "nvidia-dcgm-exporter": {"a100-0", "a100-1", "a100-2"},
    }
    plugin = next(p for p in pods if p.metadata.labels["app"] == "nvidia-device-plugin-daemonset")
    text = core.read_namespaced_pod_log(plugin.metadata.name, "gpu-operator")
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in text


def test_nvidia_smi_l_lists_the_gpus_the_container_was_given(sim, core, custom):
    create_job(custom, smi_job("one"))
    create_job(custom, smi_job("two", gpus=2))
    sim.settle()
    sim.advance(5)
    one, two = logs(core, "one").splitlines(), logs(core, "two").splitlines()
    assert len(one) == 1 and len(two) == 2
    pattern = r"GPU \d: NVIDIA A100-SXM4-80GB \(UUID: GPU-[0-9a-f-]{36}\)"
    assert all(re.fullmatch(pattern, line) for line in one + two)
    assert [line.split(":")[0] for line in two] == ["GPU 0", "GPU 1"]
    uuids = {line.split("UUID: ")[1] for line in one + two}
    assert len(uuids) == 3  # both jobs landed on a100-0, on different cards
    pods = {p.metadata.name: p for p in core.list_namespaced_pod("team-a").items}
    assert pods["one-worker-0"].status.phase == "Succeeded"  # nvidia-smi prints and exits


def test_nvidia_smi_prints_the_summary_table(sim, core, custom):
    create_job(custom, smi_job("table", args=[]))
    sim.settle()
    sim.advance(5)
    text = logs(core, "table")
    assert "Driver Version: 550.107.02" in text
    assert "NVIDIA A100-SXM4-80GB" in text and "81920MiB" in text


@pytest.mark.parametrize("sim_config", [MIG_NODE])
def test_a_mig_slice_shows_under_its_parent_card(sim, core, custom):
    create_job(custom, smi_job("slice", resource="nvidia.com/mig-1g.10gb"))
    sim.settle()
    sim.advance(5)
    lines = logs(core, "slice").splitlines()
    assert re.fullmatch(r"GPU 0: NVIDIA A100-SXM4-80GB \(UUID: GPU-[0-9a-f-]{36}\)", lines[0])
    assert re.fullmatch(r"  MIG 1g\.10gb +Device +0: \(UUID: MIG-[0-9a-f-]{36}\)", lines[1])


def test_a_broken_device_plugin_leaves_gpu_pods_pending(sim, core, custom):
    sim.device_plugin_fails("a100-0")
    assert core.read_node("a100-0").status.allocatable["nvidia.com/gpu"] == "0"
    plugin = next(
        p
        for p in core.list_namespaced_pod(
            "gpu-operator", field_selector="spec.nodeName=a100-0"
        ).items
        if p.metadata.labels["app"] == "nvidia-device-plugin-daemonset"
    )
    assert plugin.status.container_statuses[0].state.waiting.reason == "CrashLoopBackOff"
    job = smi_job("starved")
    job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] = {
        "kubernetes.io/hostname": "a100-0"
    }
    create_job(custom, job)
    sim.settle()
    pod = core.read_namespaced_pod("starved-worker-0", "team-a")
    assert pod.status.phase == "Pending"
    assert pod.status.conditions[0].message == (
        "0/3 nodes are unavailable: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )


def test_with_no_gpu_advertised_anywhere_volcano_does_not_even_enqueue(sim, core, custom):
    for node in ("a100-0", "a100-1", "a100-2"):
        sim.device_plugin_fails(node)
    create_job(custom, smi_job("starved"))
    sim.settle()
    assert core.list_namespaced_pod("team-a").items == []  # the PodGroup never got Inqueue
    events = core.list_namespaced_event("team-a", field_selector="reason=PodGroupPending").items
    assert "nvidia.com/gpu requested 1, idle 0" in events[0].message


def test_the_control_endpoint_breaks_a_device_plugin(sim, core):
    status, _, body = raw(sim, "POST", "/kubesim/v1/nodes/a100-2/device-plugin-fails", {})
    assert status == 200, body
    assert core.read_node("a100-2").status.allocatable["nvidia.com/gpu"] == "0"
    status, _, _ = raw(sim, "POST", "/kubesim/v1/nodes/nope/device-plugin-fails", {})
    assert status == 404
