"""What the inventory says about nodes reaches the cycle: foreign pods, NotReady, cordoned.

The inventory sync writes ``gpus_used_by_others``, ``ready`` and ``schedulable`` on each Node
row; the cycle's snapshot turns them into free GPUs per node. These tests set those columns
the way a sync would and check what gets admitted and what a user waiting in line is told.
"""

from __future__ import annotations

import pytest

from clusters.models import Node
from clusters.selectors import cluster_capacity
from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling import snapshot
from scheduling.cycle import run_cycle
from tests.builders import a_cluster, admitted_job, gpu_node
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def submit(user, **overrides):
    return job_submit(user=user, data=job_body(**overrides)).job


NO_ROOM = "no node with 4 free (largest free block 0, 0 free in enabled clusters)"
OUT_OF_SERVICE = (
    "no node with 4 free (largest free block 0, 0 free in enabled clusters; "
    "8 more on cordoned or NotReady nodes)"
)


@pytest.mark.parametrize(
    ("node", "admitted", "message"),
    [
        ({}, True, ""),
        ({"schedulable": False}, False, OUT_OF_SERVICE),
        ({"ready": False}, False, OUT_OF_SERVICE),
        ({"ready": False, "schedulable": False}, False, OUT_OF_SERVICE),
        ({"gpus_used_by_others": 8}, False, NO_ROOM),
        (
            {"gpus_used_by_others": 5},
            False,
            "no node with 4 free (largest free block 3 in east, 3 free in enabled clusters)",
        ),
        ({"gpus_used_by_others": 4}, True, ""),
    ],
    ids=[
        "a healthy node takes the job",
        "a cordoned node takes nothing",
        "a NotReady node takes nothing",
        "a cordoned NotReady node takes nothing",
        "a node full of foreign pods takes nothing",
        "foreign pods leave too little room",
        "foreign pods leave exactly enough room",
    ],
)
def test_the_only_node_as_the_inventory_saw_it(bob, vision, pool, quota, node, admitted, message):
    pool("east", "a100-80gb", nodes=1, gpus=8, **node)
    quota(vision, "a100-80gb", nominal=8)
    job = submit(
        bob, replicas=1, gpus_per_replica=4, gpu_models=["a100-80gb"], min_gpu_memory_gib=None
    )
    result = run_cycle()
    job.refresh_from_db()
    if admitted:
        assert result.admitted == [job.pk]
        assert (job.state, job.node_plan) == (JobState.ADMITTED, ["a100-80gb-0"])
        return
    assert result.admitted == []
    assert (job.state, job.pending_reason_code, job.queue_position) == (
        JobState.QUEUED,
        "NO_CAPACITY",
        1,
    )
    # What the job page shows: a busy node and one out of service read differently, since
    # only the second is something to ask an admin about.
    assert job.pending_reason == f"needs 4 \u00d7 a100-80gb; {message}"


def test_a_job_goes_around_a_cordoned_node_to_a_healthy_one(bob, vision, pool, quota):
    east = pool("east", "a100-80gb", nodes=2, gpus=8)
    Node.objects.filter(cluster=east, name="a100-80gb-0").update(schedulable=False)
    Node.objects.filter(cluster=east, name="a100-80gb-1").update(gpus_used_by_others=4)
    quota(vision, "a100-80gb", nominal=16)
    first = submit(bob, name="first", replicas=1, gpus_per_replica=4)
    second = submit(bob, name="second", replicas=1, gpus_per_replica=4)
    run_cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, first.node_plan) == (JobState.ADMITTED, ["a100-80gb-1"])
    # It would have fitted beside foreign pods on a100-80gb-1 (never on the cordoned node).
    assert (second.state, second.pending_reason_code) == (JobState.QUEUED, "WAITING_BEHIND")


def test_an_uncordoned_node_takes_the_waiting_job_at_the_next_cycle(bob, vision, pool, quota):
    east = pool("east", "a100-80gb", nodes=1, gpus=8, schedulable=False)
    quota(vision, "a100-80gb", nominal=8)
    job = submit(bob, replicas=1, gpus_per_replica=8)
    assert run_cycle().admitted == []
    Node.objects.filter(cluster=east).update(schedulable=True)  # the next sync sees it
    assert run_cycle().admitted == [job.pk]


# ---------------------------------------------------------------------------------------------
# The cluster page and the scheduler must tell the same story
# ---------------------------------------------------------------------------------------------
def test_the_cluster_page_and_the_cycle_agree_on_free_gpus(bob, vision, catalog):
    east = a_cluster("east")
    gpu_node(east, "a-healthy", "a100-80gb", 8)
    gpu_node(east, "a-foreign", "a100-80gb", 8, gpus_used_by_others=3)
    gpu_node(east, "a-planned", "a100-80gb", 8, gpus_used_by_others=2)
    gpu_node(east, "a-cordoned", "a100-80gb", 8, schedulable=False)
    gpu_node(east, "a-not-ready", "a100-80gb", 8, ready=False, gpus_used_by_others=1)
    # A GPU failed its health check under a foreign pod: allocatable fell below what it holds.
    gpu_node(east, "a-overused", "a100-80gb", 7, capacity=8, gpus_used_by_others=8)
    # A GPU failed under one of the portal's own jobs: its plan now exceeds allocatable.
    gpu_node(east, "a-overplanned", "a100-80gb", 7, capacity=8)
    gpu_node(east, "t-cordoned", "t4", 4, schedulable=False, gpus_used_by_others=1)
    gpu_node(east, "t-foreign", "t4", 4, gpus_used_by_others=1)
    ours = {"team": vision, "owner": bob}
    admitted_job(cluster=east, model="a100-80gb", plan=["a-planned"], gpus_per_replica=4, **ours)
    admitted_job(
        cluster=east, model="a100-80gb", plan=["a-overplanned"], gpus_per_replica=8, **ours
    )
    admitted_job(
        cluster=east, model="t4", plan=["t-foreign", "t-foreign"], gpus_per_replica=1, **ours
    )

    clusters, _ = snapshot._clusters(snapshot._holding().planned)
    engine_nodes = {(n.model, n.name): n.free_gpus for c in clusters for n in c.nodes}
    page = {m.model: m for m in cluster_capacity(east)}
    for model in ("a100-80gb", "t4"):
        frees = [free for (m, _), free in engine_nodes.items() if m == model]
        assert (page[model].free, page[model].largest_free_block) == (sum(frees), max(frees)), model
    # a-healthy 8 + a-foreign 5 + a-planned 2 (8 - 2 foreign - 4 planned), less the GPU
    # a-overplanned's plan counts beyond its allocatable: never clamped away, it comes off the
    # node with the most free (a-healthy), so the pool never offers a GPU its books lack.
    assert (page["a100-80gb"].free, page["a100-80gb"].largest_free_block) == (14, 7)
    assert page["a100-80gb"].over_counts and "a-overplanned" in page["a100-80gb"].over_counts[0]
    assert (page["t4"].free, page["t4"].largest_free_block) == (1, 1)
    assert page["a100-80gb"].used_by_others == 14
    assert page["a100-80gb"].planned == 12
