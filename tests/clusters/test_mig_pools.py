"""One MIG profile offered two ways in one cluster: as ``nvidia.com/gpu`` on nodes of the
device plugin's single strategy and as ``nvidia.com/mig-1g.10gb`` on mixed-strategy nodes.

Both are the catalog's ``a100-80gb-mig-1g.10gb``, but a pod asks for one resource name, so a
job's replicas must all land on nodes that advertise the same one: the scheduler keeps a pool
per resource and never spreads a gang over both (issue 21), and each job's manifest asks for
the resource of the nodes it was planned on.
"""

from __future__ import annotations

import pytest

from clusters.inventory import inventory_sync
from clusters.manifests import job_manifest
from clusters.models import Node
from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from scheduling.snapshot import clusters_now
from tests.clusters.test_volcano_manifest import assert_valid_job, containers_of
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

SLICE = "a100-80gb-mig-1g.10gb"
SINGLE, MIXED = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"

TWO_STRATEGIES = {
    "name": "two-strategies",
    "namespaces": ["gpupool"],
    "nodePools": [
        # 1 GPU cut into 7 x 1g.10gb, 7 stay whole.
        {"name": "a100-mixed", "count": 1, "gpuModel": "a100-80gb", "gpus": 8,
         "mig": {"gpus": 1, "profiles": {"1g.10gb": 7}}},
        # 1 GPU in single strategy: each of its 7 slices is a nvidia.com/gpu.
        {"name": "a100-sliced", "count": 1, "gpuModel": "a100-80gb", "gpus": 7,
         "product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
         "labels": {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true"}},
    ],
}  # fmt: skip


@pytest.fixture
def two_strategies(register, vision):
    from kubesim import KubeSim

    with KubeSim(TWO_STRATEGIES, clock_speed=0) as sim:
        cluster = register(sim, name="east")
        assert inventory_sync(cluster=cluster).ok
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key=SLICE), nominal=64)
    return cluster


def _slices(bob, name: str, replicas: int, per_replica: int):
    body = job_body(name=name, replicas=replicas, gpus_per_replica=per_replica)
    body.update(gpu_models=[SLICE], min_gpu_memory_gib=None)
    return job_submit(user=bob, data=body).job


def test_the_scheduler_sees_one_pool_per_resource(two_strategies):
    (east,) = clusters_now()
    groups = {(n.name, n.group) for n in east.nodes if n.model == SLICE}
    assert groups == {("a100-mixed-0", MIXED), ("a100-sliced-0", SINGLE)}


def test_a_gang_never_spans_both_resources_and_each_job_asks_for_its_own(two_strategies, bob):
    # 7 free slices on each node: 2 x 7 fits only across both, which no pod spec can ask for.
    gang = _slices(bob, "gang", replicas=2, per_replica=7)
    assert run_cycle().admitted == []
    gang.refresh_from_db()
    assert (gang.state, gang.pending_reason_code) == (JobState.QUEUED, "JOB_TOO_LARGE"), (
        gang.pending_reason
    )
    assert gang.pending_reason.endswith(
        "needs 2 replicas of 7; even empty, the nodes that offer it under one resource name "
        "hold only 1 (a gang cannot mix resource names)"
    )

    # Two replicas that fit on one node go to one node's resource, never half on each.
    pair = _slices(bob, "pair", replicas=2, per_replica=3)
    one = _slices(bob, "one", replicas=1, per_replica=7)
    admitted = set(run_cycle().admitted)
    assert {pair.pk, one.pk} <= admitted
    for job in (pair, one):
        job.refresh_from_db()
        nodes = Node.objects.filter(
            cluster=two_strategies, name__in=job.node_plan, gpu_model__key=SLICE
        )
        (resource,) = {n.gpu_resource for n in nodes}
        _, manifest = job_manifest(job)
        assert_valid_job(manifest)
        for container in containers_of(manifest):
            limits = container["resources"]["limits"]
            assert limits.get(resource) == job.gpus_per_replica, limits
            other = MIXED if resource == SINGLE else SINGLE
            assert other not in limits, limits
    # Each took one node whole: the two jobs are on different resources.
    assert {pair.node_plan[0], one.node_plan[0]} == {"a100-mixed-0", "a100-sliced-0"}
