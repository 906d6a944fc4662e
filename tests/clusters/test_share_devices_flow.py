"""Shares placed per device, the whole flow (issue 31): submit → cycle → Celery dispatch →
kubesim over HTTPS → the reconcile reading back where each share landed.

One shared node of two 80 GiB A100s (HAMi, or Volcano vGPU). A 50 GiB share is admitted on
one device and pinned there; the next cycle sees that device taken and puts a second 50 GiB
share on the other one; a 40 GiB share then waits, though the node has 60 GiB free, because
no single device has 40 GiB, and it says so. The device each share really holds is read back
from its pod (the scheduler's allocation annotation) and kept in the books.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from clusters.devices import pod_device
from clusters.inventory import inventory_sync
from clusters.models import Node
from clusters.queues import queues_desired_for_cluster, queues_sync
from clusters.tasks import cluster_reconcile_and_enqueue
from portal.jobs.services import job_submit
from portal.models import Job, JobState
from rules import volcano
from scheduling.catalog import shared_pool_create
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import wait_state
from tests.conftest import job_body

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

S = JobState


@pytest.fixture(params=["hami", "volcano-vgpu"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sim_config(mode: str) -> dict[str, Any]:
    return {
        "name": f"shares-{mode}",
        "simulation": {"podStartupSeconds": 1, "defaultDurationSeconds": 3600},
        "namespaces": ["gpupool"],
        "nodePools": [
            {"name": "a100-shared", "count": 1, "gpuModel": "a100-80gb", "gpus": 2, "cpu": 128,
             "memory": "1Ti", "sharing": {"mode": mode, "deviceSplitCount": 4}},
        ],
    }  # fmt: skip


@pytest.fixture
def shared_cluster(sim: Any, register: Any, catalog: None, vision: Any, mode: str) -> Any:
    card = GpuModel.objects.get(key="a100-80gb")
    pool = shared_pool_create(card=card)
    Quota.objects.create(team=vision, gpu_model=pool, nominal=160)
    cluster = register(sim, sharing_mode=mode)
    assert inventory_sync(cluster=cluster).ok
    assert queues_sync(cluster=cluster, desired=queues_desired_for_cluster(cluster)).ok
    return cluster


def share(user: Any, gib: int, cores: int | None = None) -> Job:
    body = job_body(replicas=1, gpu_memory_gib=gib, gpu_cores_percent=cores, kind="inference")
    for key in ("gpus_per_replica", "min_gpu_memory_gib"):
        body.pop(key)
    return job_submit(user=user, data=body).job


def devices_of(cluster: Any) -> list[str]:
    (node,) = Node.objects.filter(cluster=cluster)
    return [d["id"] for d in node.devices]


def landed(sim: Any, job: Job) -> str:
    """The device kubesim's scheduler put the job's pod on, from the pod it serves over the
    API (the allocation annotation HAMi and Volcano vGPU write)."""
    name = volcano.volcano_job_name(str(job.public_id), job.attempt_number)
    (pod,) = [p for p in sim.list("pods") if p["metadata"]["name"].startswith(name)]
    return pod_device(pod)


def admitted_and_running(sim: Any, job: Job) -> Job:
    assert run_cycle().admitted == [job.pk] or Job.objects.get(pk=job.pk).state != S.QUEUED
    wait_state(job, S.SUBMITTED, S.RUNNING)
    sim.settle()
    sim.advance(2)
    job.refresh_from_db()
    return job


def test_a_share_no_single_device_holds_is_never_admitted_though_the_node_has_the_gib(
    sim, shared_cluster, bob, client
):
    """The regression of issue 31, through the whole flow: books per device, pin, read-back."""
    uuids = devices_of(shared_cluster)
    assert len(uuids) == 2 and all(u.startswith("GPU-") for u in uuids)

    # 1. A 50 GiB share: admitted with its device planned, pinned there, and it lands there.
    first = admitted_and_running(sim, share(bob, 50))
    assert first.node_plan == ["a100-shared-0"] and first.device_plan[0] in uuids
    assert landed(sim, first) == first.device_plan[0]

    # 2. The next cycle sees that device taken: a second 50 GiB share goes on the other one.
    second = admitted_and_running(sim, share(bob, 50))
    assert second.device_plan[0] in uuids and second.device_plan[0] != first.device_plan[0]
    assert landed(sim, second) == second.device_plan[0]

    # 3. 60 GiB free on the node, 30 on each device: a 40 GiB share is not admitted.
    third = share(bob, 40)
    for _ in range(2):  # and stays out, cycle after cycle
        assert third.pk not in run_cycle().admitted
    third.refresh_from_db()
    assert third.state == S.QUEUED
    assert third.pending_reason_code == "NO_CAPACITY"
    assert "no single device has 40 GiB free" in third.pending_reason
    assert "the most free on one device is 30 GiB" in third.pending_reason
    assert not [
        p
        for p in sim.list("pods")
        if p["metadata"]["labels"].get(volcano.LABEL_JOB_ID) == str(third.public_id)
    ]

    # 4. The cluster page shows each device's GiB used / total, and why 60 free is not 40.
    client.force_login(bob)
    page = client.get(reverse("cluster-detail", args=[shared_cluster.name])).content.decode()
    assert page.count("50 / 80</li>") == 2
    assert "at most 30 GiB free on one device" in page


def test_the_reconcile_keeps_the_books_on_the_device_a_share_really_holds(sim, shared_cluster, bob):
    job = admitted_and_running(sim, share(bob, 50))
    truth = landed(sim, job)
    other = next(u for u in devices_of(shared_cluster) if u != truth)
    # Books that drifted (a lost report): the share charged to the device it is not on.
    Job.objects.filter(pk=job.pk).update(device_plan=[other])
    assert cluster_reconcile_and_enqueue(cluster=shared_cluster).ok
    job.refresh_from_db()
    assert job.device_plan == [truth]
    # The books follow: a second 50 GiB share is put on the device left free.
    second = admitted_and_running(sim, share(bob, 50))
    assert second.device_plan == [other] and landed(sim, second) == other


def test_shares_that_cap_compute_are_booked_on_their_devices_compute_too(sim, shared_cluster, bob):
    # 60 % of a device's compute each: one per device, though one device has the memory for all.
    first = admitted_and_running(sim, share(bob, 10, cores=60))
    second = admitted_and_running(sim, share(bob, 10, cores=60))
    assert {first.device_plan[0], second.device_plan[0]} == set(devices_of(shared_cluster))
    assert {landed(sim, first), landed(sim, second)} == set(devices_of(shared_cluster))
    third = share(bob, 10, cores=60)
    assert third.pk not in run_cycle().admitted
    third.refresh_from_db()
    assert third.state == S.QUEUED
    assert "no single device has 10 GiB and 60 % of its compute free" in third.pending_reason
