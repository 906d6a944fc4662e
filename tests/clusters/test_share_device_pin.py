"""The manifest pins a share to the device the portal booked (issue 31), and stays valid.

Pure builder tests: HAMi reads ``nvidia.com/use-gpuuuid``, Volcano's deviceshare plugin
``volcano.sh/vgpu-use-gpuuuid``; each task's pods may take only its replicas' devices, and a
task with a replica of unknown device is left to the cluster's scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest

from rules.volcano import GpuShare, ManifestError, build_volcano_job
from tests.clusters.test_volcano_manifest import a_spec, assert_valid_job, tasks_of

A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
B = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"


def share_spec(mode: str, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "gpu_share": GpuShare(mode=mode, memory_mib=20480, cores_percent=30),
        "gpus_per_replica": 20,
        "gpu_resource": "nvidia.com/gpumem" if mode == "hami" else "volcano.sh/vgpu-memory",
        "gpu_model": "a100-80gb-shared",
    }
    fields.update(overrides)
    return a_spec(**fields)


def annotations(job: dict[str, Any], task: str) -> dict[str, str]:
    return dict(tasks_of(job)[task]["template"]["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("mode", "key"),
    [("hami", "nvidia.com/use-gpuuuid"), ("volcano-vgpu", "volcano.sh/vgpu-use-gpuuuid")],
    ids=["HAMi reads nvidia.com/use-gpuuuid", "Volcano vGPU reads volcano.sh/vgpu-use-gpuuuid"],
)
def test_a_share_is_pinned_to_its_planned_device_and_the_manifest_validates(mode, key):
    job = build_volcano_job(
        share_spec(mode, replicas=1, replica_hosts=["gpu-0"], replica_devices=[A])
    )
    assert_valid_job(job)
    assert annotations(job, "master")[key] == A
    affinity = tasks_of(job)["master"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-0"]} in (
        term["matchExpressions"]
    )


def test_each_task_may_take_only_its_own_replicas_devices():
    job = build_volcano_job(
        share_spec("hami", replicas=3, replica_hosts=["g0", "g0", "g1"], replica_devices=[A, B, A])
    )
    assert_valid_job(job)
    assert annotations(job, "master")["nvidia.com/use-gpuuuid"] == A
    assert annotations(job, "worker")["nvidia.com/use-gpuuuid"] == ",".join(sorted({A, B}))


def test_a_task_with_a_replica_of_unknown_device_is_not_pinned():
    job = build_volcano_job(share_spec("hami", replicas=2, replica_devices=[A, ""]))
    assert annotations(job, "master")["nvidia.com/use-gpuuuid"] == A
    assert "nvidia.com/use-gpuuuid" not in annotations(job, "worker")


def test_without_a_device_plan_nothing_is_pinned():
    job = build_volcano_job(share_spec("volcano-vgpu"))
    assert_valid_job(job)
    assert "volcano.sh/vgpu-use-gpuuuid" not in annotations(job, "master")


@pytest.mark.parametrize(
    ("overrides", "share"),
    [
        ({"replicas": 2, "replica_devices": [A]}, True),
        ({"replica_devices": ["GPU-a,GPU-b"]}, True),
        ({"replica_devices": [A]}, False),
    ],
    ids=["one device per replica", "a UUID, not a list", "whole GPUs are never pinned so"],
)
def test_a_bad_device_plan_names_the_field(overrides, share):
    with pytest.raises(ManifestError, match="replica_devices"):
        share_spec("hami", **overrides) if share else a_spec(**overrides)
