"""Shared (fractional) GPUs end to end: kubesim nodes → inventory → cycle → manifest → pods.

A cluster with a pool of whole A100s and a pool of A100s split by Volcano vGPU (or HAMi), all
labelled ``gpu-type=a100-80gb``. The inventory must read the split nodes as GiB of the
catalog's shared pool and never as whole GPUs; the cycle must put shares on the shared pool and
whole-GPU jobs on whole cards; the manifest must ask for the share in the cluster's sharing
mode, pass the CRD strictly, and its pods must land on the shared node's devices.
"""

from __future__ import annotations

from typing import Any

import pytest

from clusters.clients import cluster_client
from clusters.inventory import inventory_sync
from clusters.manifests import job_manifest
from clusters.models import Node
from clusters.nodes import hami_devices
from clusters.queues import queues_desired_for_cluster, queues_sync
from clusters.selectors import largest_node_gpus
from portal.jobs.services import job_submit
from portal.jobs.spec import SpecError
from portal.models import JobState
from rules import volcano
from scheduling.catalog import shared_pool_create
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.test_volcano_manifest import assert_valid_job, containers_of
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

SHARED_MODEL = "a100-80gb-shared"


def mixed(mode: str) -> dict[str, Any]:
    return {
        "name": f"mixed-{mode}",
        "simulation": {"podStartupSeconds": 1, "defaultDurationSeconds": 600},
        "namespaces": ["gpupool"],
        "nodePools": [
            {"name": "a100", "count": 1, "gpuModel": "a100-80gb", "gpus": 8, "cpu": 128,
             "memory": "1Ti"},
            {"name": "a100-shared", "count": 1, "gpuModel": "a100-80gb", "gpus": 2, "cpu": 128,
             "memory": "1Ti", "sharing": {"mode": mode, "deviceSplitCount": 4}},
        ],
    }  # fmt: skip


@pytest.fixture(params=["volcano-vgpu", "hami"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sim_config(mode: str) -> dict[str, Any]:
    return mixed(mode)


@pytest.fixture
def shared(catalog: None, vision: Any) -> GpuModel:
    card = GpuModel.objects.get(key="a100-80gb")
    pool = shared_pool_create(card=card)
    Quota.objects.create(team=vision, gpu_model=card, nominal=8)
    Quota.objects.create(team=vision, gpu_model=pool, nominal=160)
    return pool


@pytest.fixture
def mixed_cluster(sim: Any, register: Any, shared: GpuModel, mode: str) -> Any:
    cluster = register(sim, sharing_mode=mode)
    result = inventory_sync(cluster=cluster)
    assert result.ok, result.message
    assert queues_sync(cluster=cluster, desired=queues_desired_for_cluster(cluster)).ok
    return cluster


def share(user: Any, **overrides: Any) -> Any:
    body = job_body(replicas=2, gpu_memory_gib=20, gpu_cores_percent=50, kind="inference")
    for key in ("gpus_per_replica", "min_gpu_memory_gib"):
        body.pop(key)
    body.update(overrides)
    return job_submit(user=user, data=body).job


def test_a_shared_pool_is_priced_per_gib_of_its_card(shared):
    card = shared.shares
    assert shared.key == SHARED_MODEL and shared.memory_gib == card.memory_gib == 80
    assert shared.cost_factor == pytest.approx(card.cost_factor / 80)
    assert shared_pool_create(card=card) == shared  # idempotent


def test_shared_nodes_are_read_as_gib_of_the_shared_pool_never_as_whole_gpus(mixed_cluster, mode):
    rows = {
        (n.name, n.gpu_resource): n
        for n in Node.objects.filter(cluster=mixed_cluster).select_related("gpu_model")
    }
    resource = "volcano.sh/vgpu-memory" if mode == "volcano-vgpu" else "nvidia.com/gpumem"
    assert set(rows) == {("a100-0", "nvidia.com/gpu"), ("a100-shared-0", resource)}
    whole, split = rows[("a100-0", "nvidia.com/gpu")], rows[("a100-shared-0", resource)]
    assert (whole.gpu_model.key, whole.gpu_allocatable) == ("a100-80gb", 8)
    assert (split.gpu_model.key, split.gpu_allocatable) == (SHARED_MODEL, 160)
    assert largest_node_gpus() == 8  # submit's bound on GPUs per replica ignores GiB rows


def test_hami_registration_is_read_in_both_encodings():
    old = "GPU-a,10,81920,100,NVIDIA-A100,0,true:GPU-b,10,81920,100,NVIDIA-A100,0,false:"
    new = '[{"id": "GPU-a", "count": 4, "devmem": 40960, "devcore": 100, "health": true}]'
    assert hami_devices(old) == [(81920, 10)]
    assert hami_devices(new) == [(40960, 4)]
    assert hami_devices("garbage") == []


def test_a_share_runs_on_the_shared_node_and_a_whole_gpu_job_on_a_whole_card(
    sim, mixed_cluster, bob, mode
):
    fraction = share(bob)
    whole = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=2)).job
    assert (fraction.gpus_per_replica, fraction.gpu_memory_gib) == (20, 20)
    run_cycle()
    fraction.refresh_from_db()
    whole.refresh_from_db()
    assert fraction.state == whole.state == JobState.ADMITTED
    assert (fraction.gpu_model.key, fraction.node_plan) == (SHARED_MODEL, ["a100-shared-0"] * 2)
    assert (whole.gpu_model.key, whole.node_plan) == ("a100-80gb", ["a100-0"])

    namespace, manifest = job_manifest(fraction)
    assert_valid_job(manifest)
    limits = containers_of(manifest)[0]["resources"]["limits"]
    if mode == "volcano-vgpu":
        assert manifest["spec"]["schedulerName"] == "volcano"
        assert (limits["volcano.sh/vgpu-number"], limits["volcano.sh/vgpu-memory"]) == (1, 20480)
        assert limits["volcano.sh/vgpu-cores"] == 50
        assert "nvidia.com/gpu" not in limits
    else:
        assert manifest["spec"]["schedulerName"] == "hami-scheduler"
        assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpumem"]) == (1, 20480)
        assert limits["nvidia.com/gpucores"] == 50
    _, whole_manifest = job_manifest(whole)
    assert_valid_job(whole_manifest)
    assert containers_of(whole_manifest)[0]["resources"]["limits"]["nvidia.com/gpu"] == 2

    client = cluster_client(mixed_cluster)
    client.create_job(namespace, manifest)
    client.create_job(namespace, whole_manifest)
    sim.settle()
    sim.advance(2)
    name = volcano.volcano_job_name(str(fraction.public_id))
    assert {p["spec"].get("nodeName") for p in sim.job_pods(namespace, name)} == {"a100-shared-0"}
    whole_name = volcano.volcano_job_name(str(whole.public_id))
    assert {p["spec"].get("nodeName") for p in sim.job_pods(namespace, whole_name)} == {"a100-0"}
    devices = sim.sim.scheduler.nodes["a100-shared-0"].devices
    assert devices.in_use() == (2 * 20480, 2 * 50)


def test_the_shared_pool_fills_device_by_device(sim, mixed_cluster, bob):
    # 160 GiB over two 80 GiB devices: the node's sum would take three 50 GiB shares, but a
    # share lives on one device, and each device holds one (issue 31).
    jobs = [share(bob, replicas=1, gpu_memory_gib=50, gpu_cores_percent=None) for _ in range(4)]
    run_cycle()
    states = []
    for job in jobs:
        job.refresh_from_db()
        states.append(job.state)
    assert states.count(JobState.ADMITTED) == 2
    waiting = [j for j in jobs if j.state == JobState.QUEUED]
    assert all(j.pending_reason_code for j in waiting)
    # The next cycle sees the admitted shares on their devices: no device has room at all.
    run_cycle()
    waiting[-1].refresh_from_db()
    assert waiting[-1].state == JobState.QUEUED
    assert "no single device has 50 GiB free" in waiting[-1].pending_reason


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpu_memory_gib": 100}, "gpu_memory_gib"),
        ({"gpus_per_replica": 2}, "gpus_per_replica"),
        ({"gpu_cores_percent": 101}, "gpu_cores_percent"),
        ({"gpu_models": ["a100-80gb"]}, "gpu_models"),
    ],
    ids=[
        "more memory than one device has",
        "a share lives on one device",
        "compute is a percentage",
        "a share names only shared pools",
    ],
)
def test_a_bad_share_is_refused_naming_the_field(shared, bob, overrides, field):
    with pytest.raises(SpecError) as error:
        share(bob, **overrides)
    assert field in error.value.fields


def test_a_whole_gpu_job_may_not_name_a_shared_pool(shared, bob):
    with pytest.raises(SpecError) as error:
        job_submit(user=bob, data=job_body(gpu_models=[SHARED_MODEL], min_gpu_memory_gib=None))
    assert "gpu_models" in error.value.fields


def test_queue_capability_counts_a_vgpu_pool_in_mib(mixed_cluster, mode):
    queues = {q.team_slug: q for q in queues_desired_for_cluster(mixed_cluster)}
    capability = queues["vision"].capability
    assert capability["nvidia.com/gpu"] == 8
    if mode == "volcano-vgpu":
        assert capability["volcano.sh/vgpu-memory"] == 160 * 1024
    else:
        assert "nvidia.com/gpumem" not in capability  # HAMi's pods bypass Volcano's queues
