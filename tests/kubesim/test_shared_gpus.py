"""Shared GPUs in kubesim: Volcano vGPU and HAMi nodes, shares placed on one device each.

Everything goes through the official client: nodes are read as a portal would read them, jobs
are created as Volcano Jobs, and a share that no single device can hold stays Pending with the
reason HAMi's filter gives (``CardInsufficientMemory`` / ``CardInsufficientCore``), even when
the node as a whole has the memory.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.config import ConfigError, load_config
from tests.kubesim.builders import create_job, vcjob

SHARED: dict[str, Any] = {
    "name": "shared",
    "namespaces": ["team-a"],
    "queues": [{"name": "team-a", "weight": 1}],
    "nodePools": [
        {
            "name": "vgpu",
            "count": 1,
            "gpuModel": "a100-80gb",
            "gpus": 2,
            "sharing": {"mode": "volcano-vgpu", "deviceSplitCount": 4, "policy": "binpack"},
        },
        {
            "name": "hami",
            "count": 1,
            "gpuModel": "t4",
            "gpus": 2,
            "sharing": {"mode": "hami", "deviceSplitCount": 10, "policy": "spread"},
        },
    ],
}


@pytest.fixture
def sim_config() -> dict[str, Any]:
    return SHARED


def share_job(
    name: str,
    limits: dict[str, Any],
    *,
    scheduler: str = "volcano",
    selector: str = "a100-80gb",
    replicas: int = 1,
) -> dict[str, Any]:
    job = vcjob(name, replicas=replicas, gpus=0, node_selector={"gpu-type": selector})
    job["spec"]["schedulerName"] = scheduler
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {"limits": limits}
    return job


def vgpu(mib: int, cores: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": mib}
    if cores is not None:
        out["volcano.sh/vgpu-cores"] = cores
    return out


def hami(mib: int, cores: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib}
    if cores is not None:
        out["nvidia.com/gpucores"] = cores
    return out


def _nodes(sim: KubeSim, name: str, namespace: str = "team-a") -> list[str]:
    return sorted(p["spec"].get("nodeName") or "" for p in sim.job_pods(namespace, name))


def _devices(sim: KubeSim, node: str) -> list[int]:
    devices = sim.sim.scheduler.nodes[node].devices
    assert devices is not None
    return list(devices.memory)


def test_shared_nodes_advertise_what_the_device_plugins_do(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    vgpu_node, hami_node = nodes["vgpu-0"], nodes["hami-0"]
    assert vgpu_node.status.allocatable["volcano.sh/vgpu-number"] == "8"
    assert vgpu_node.status.allocatable["volcano.sh/vgpu-memory"] == str(2 * 81920)
    assert "nvidia.com/gpu" not in vgpu_node.status.allocatable
    assert "volcano.sh/node-vgpu-register" in vgpu_node.metadata.annotations
    assert hami_node.status.allocatable["nvidia.com/gpu"] == "20"
    register = hami_node.metadata.annotations["hami.io/node-nvidia-register"]
    assert register.count(",15360,100,") == 2
    assert hami_node.metadata.labels["gpu"] == "on"


def test_binpack_puts_shares_on_the_fullest_device_that_fits(sim, custom):
    create_job(custom, share_job("one", vgpu(30 * 1024)))
    sim.settle()
    create_job(custom, share_job("two", vgpu(30 * 1024)))
    sim.settle()
    assert _nodes(sim, "one") == _nodes(sim, "two") == ["vgpu-0"]
    assert sorted(_devices(sim, "vgpu-0")) == [20 * 1024, 80 * 1024]


def test_a_share_larger_than_any_device_stays_pending_though_the_node_has_the_memory(sim, custom):
    # 100 GiB: the node has 160 GiB, but no single 80 GiB device can hold it.
    create_job(custom, share_job("huge", vgpu(100 * 1024)))
    sim.settle()
    pods = sim.job_pods("team-a", "huge")
    assert [p["spec"].get("nodeName") for p in pods] == [None]
    condition = pods[0]["status"]["conditions"][0]
    assert (condition["type"], condition["status"]) == ("PodScheduled", "False")
    assert "CardInsufficientMemory" in condition["message"]
    assert sim.job_phase("team-a", "huge") == "Pending"


def test_memory_split_across_devices_does_not_make_room(sim, custom):
    # 50 GiB on each device: 60 GiB free in total, but at most 30 on one device.
    create_job(custom, share_job("left", vgpu(50 * 1024)))
    create_job(custom, share_job("right", vgpu(50 * 1024)))
    sim.settle()
    assert sorted(_devices(sim, "vgpu-0")) == [30 * 1024, 30 * 1024]
    create_job(custom, share_job("forty", vgpu(40 * 1024)))
    sim.settle()
    assert _nodes(sim, "forty") == [""]


def test_hami_shares_are_bound_by_hami_scheduler_and_capped_by_compute(sim, custom):
    for name in ("a", "b"):
        create_job(
            custom, share_job(name, hami(4096, 60), scheduler="hami-scheduler", selector="t4")
        )
    sim.settle()
    assert _nodes(sim, "a") == _nodes(sim, "b") == ["hami-0"]
    # Spread: one share per device; a third 60 % share fits no device's compute.
    create_job(custom, share_job("c", hami(4096, 60), scheduler="hami-scheduler", selector="t4"))
    sim.settle()
    pod = sim.job_pods("team-a", "c")[0]
    assert pod["spec"].get("nodeName") is None
    assert "CardInsufficientCore" in pod["status"]["conditions"][0]["message"]


def test_a_released_share_gives_its_device_back(sim, custom):
    create_job(custom, share_job("short", vgpu(70 * 1024)))
    sim.settle()
    sim.advance(5)
    assert sorted(_devices(sim, "vgpu-0")) == [10 * 1024, 80 * 1024]
    sim.advance(120)  # the job's 60 s run ends
    sim.settle()
    assert sorted(_devices(sim, "vgpu-0")) == [80 * 1024, 80 * 1024]


def _uuids(core: Any, node: str) -> list[str]:
    """The device UUIDs a shared node registered, in device order (read over the API)."""
    annotations = core.read_node(node).metadata.annotations
    text = annotations.get("hami.io/node-nvidia-register") or annotations.get(
        "volcano.sh/node-vgpu-register"
    )
    return [record.split(",")[0] for record in text.split(":") if record]


def _annotated(job: dict[str, Any], key: str, uuid: str) -> dict[str, Any]:
    template = job["spec"]["tasks"][0]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[key] = uuid
    return job


def _allocated(core: Any, name: str, key: str) -> str:
    """The device the scheduler wrote on the job's pod (HAMi's protocol), read over the API."""
    (pod,) = [  # one replica per job here
        p for p in core.list_namespaced_pod("team-a").items if p.metadata.name.startswith(name)
    ]
    return str((pod.metadata.annotations or {}).get(key, ""))


def test_each_shared_node_registers_its_own_device_uuids(core):
    vgpu_ids, hami_ids = _uuids(core, "vgpu-0"), _uuids(core, "hami-0")
    assert len(vgpu_ids) == len(hami_ids) == 2
    assert all(u.startswith("GPU-") for u in vgpu_ids + hami_ids)
    assert len(set(vgpu_ids + hami_ids)) == 4


@pytest.mark.parametrize(
    ("mode", "limits", "scheduler", "selector", "pin", "written"),
    [
        (
            "vgpu-0",
            vgpu(10 * 1024),
            "volcano",
            "a100-80gb",
            "volcano.sh/vgpu-use-gpuuuid",
            "volcano.sh/vgpu-ids-new",
        ),
        (
            "hami-0",
            hami(2048),
            "hami-scheduler",
            "t4",
            "nvidia.com/use-gpuuuid",
            "hami.io/vgpu-devices-allocated",
        ),
    ],
    ids=["Volcano vGPU", "HAMi"],
)
def test_a_pinned_share_lands_on_its_device_and_the_pod_says_so(
    sim, core, custom, mode, limits, scheduler, selector, pin, written
):
    # Binpack (vGPU) and spread (HAMi) would both take device 0 of an empty node first.
    second = _uuids(core, mode)[1]
    create_job(
        custom,
        _annotated(
            share_job("pinned", limits, scheduler=scheduler, selector=selector), pin, second
        ),
    )
    sim.settle()
    assert _nodes(sim, "pinned") == [mode]
    assert _allocated(core, "pinned", written).startswith(f"{second},NVIDIA,")
    free = _devices(sim, mode)
    assert free[0] == sim.sim.scheduler.nodes[mode].devices.size[0] > free[1]


def test_a_share_pinned_to_a_device_without_room_waits_though_another_device_has_it(
    sim, core, custom
):
    first = _uuids(core, "vgpu-0")[0]
    create_job(custom, share_job("filler", vgpu(60 * 1024)))  # binpack: device 0
    sim.settle()
    create_job(
        custom,
        _annotated(share_job("pinned", vgpu(30 * 1024)), "volcano.sh/vgpu-use-gpuuuid", first),
    )
    sim.settle()
    pod = sim.job_pods("team-a", "pinned")[0]
    assert pod["spec"].get("nodeName") is None
    assert "CardInsufficientMemory" in pod["status"]["conditions"][0]["message"]
    # Unpinned, the same share fits on the other device.
    create_job(custom, share_job("free", vgpu(30 * 1024)))
    sim.settle()
    assert _nodes(sim, "free") == ["vgpu-0"]


def test_a_hami_pod_may_ask_for_binpack_on_a_node_that_spreads(sim, core, custom):
    # The HAMi pool spreads; a pod's own hami.io/gpu-scheduler-policy wins for that pod.
    create_job(custom, share_job("a", hami(4096), scheduler="hami-scheduler", selector="t4"))
    sim.settle()
    packed = share_job("b", hami(4096), scheduler="hami-scheduler", selector="t4")
    create_job(custom, _annotated(packed, "hami.io/gpu-scheduler-policy", "binpack"))
    sim.settle()
    a = _allocated(core, "a", "hami.io/vgpu-devices-allocated").split(",")[0]
    b = _allocated(core, "b", "hami.io/vgpu-devices-allocated").split(",")[0]
    assert a == b  # binpack: the fullest device that fits, the one "a" took


def test_a_bad_sharing_config_names_its_key():
    bad = {"nodePools": [{"name": "p", "count": 1, "gpus": 1, "sharing": {"mode": "mps"}}]}
    with pytest.raises(ConfigError, match=r"nodePools\[0\].sharing.mode"):
        load_config(bad)
