"""A node whose CPUs are taken strands its GPUs (issue 31): the inventory reads each node's
free CPU and memory (allocatable less what pods the portal did not create ask), the cycle takes
off what the portal's own jobs planned there ask, and the engine plans no replica where its
CPU or memory does not fit. Through kubesim over HTTP, as a real cluster would hold the pod
Pending with ``Insufficient cpu``."""

from __future__ import annotations

from typing import Any

import pytest

from clusters.inventory import inventory_sync
from clusters.models import Node
from clusters.queues import TeamQueue, queues_sync
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import SMALL
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sim_config() -> dict[str, Any]:
    pool = {"name": "a100", "count": 2, "gpuModel": "a100-80gb", "gpus": 8, "cpu": 64,
            "memory": "512Gi"}  # fmt: skip
    return {**SMALL, "nodePools": [pool]}


def _cpu_hog(sim: Any, node: str, cpu: str) -> None:
    """A one-pod Volcano Job some other client runs on ``node``: no GPU, ``cpu`` CPUs."""
    container = {"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                 "resources": {"requests": {"cpu": cpu}}}  # fmt: skip
    sim.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "hog", "namespace": "default"},
            "spec": {
                "minAvailable": 1,
                "schedulerName": "volcano",
                "tasks": [
                    {
                        "name": "t",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "nodeSelector": {"kubernetes.io/hostname": node},
                                "containers": [container],
                            }
                        },
                    }
                ],
            },
        },
        namespace="default",
    )
    sim.advance(3)


@pytest.fixture
def ready(sim: Any, register: Any, vision: Any, bob: Any) -> Any:
    cluster = register(sim)
    queues_sync(cluster=cluster, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=16)
    return cluster


def _submit(bob: Any, name: str) -> Job:
    body = job_body(name=name, replicas=1, gpus_per_replica=4, cpu_per_replica=32)
    body.pop("min_gpu_memory_gib", None)
    return job_submit(user=bob, data={**body, "gpu_models": ["a100-80gb"]}).job


def test_the_inventory_takes_foreign_pods_cpu_off_the_node(sim, ready):
    _cpu_hog(sim, "a100-0", "60")
    assert inventory_sync(cluster=ready).ok
    free = dict(Node.objects.values_list("name", "cpu_free_millicores"))
    assert free == {"a100-0": 4_000, "a100-1": 64_000}
    assert Node.objects.get(name="a100-0").memory_free_mib == 512 * 1024


def test_a_node_whose_cpus_are_taken_gets_no_replica_and_the_wait_says_why(sim, ready, bob):
    _cpu_hog(sim, "a100-0", "60")
    assert inventory_sync(cluster=ready).ok
    first = _submit(bob, "first")
    run_cycle()
    first.refresh_from_db()
    # a100-0 has 8 free GPUs but 4 CPUs: the 32-CPU replica goes to a100-1.
    assert (first.state, first.node_plan) == (JobState.ADMITTED, ["a100-1"])
    second = _submit(bob, "second")
    run_cycle()
    second.refresh_from_db()
    # a100-1 has 4 GPUs and 32 CPUs left: room for exactly one more such replica.
    assert (second.state, second.node_plan) == (JobState.ADMITTED, ["a100-1"])
    third = _submit(bob, "third")
    run_cycle()
    third.refresh_from_db()
    assert third.state == JobState.QUEUED
    assert "lack the CPU or memory" in third.pending_reason, third.pending_reason
