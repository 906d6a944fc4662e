"""A node that fails under a running job moves the job to a healthy node within seconds.

Each replica is pinned to its planned node, so a job whose node went NotReady (or whose pods
a drain evicted from a cordoned node) used to wait, RUNNING, for the unschedulable bound (ten
minutes) before it was requeued, and the requeue used up one of its allowed requeues. Now the
nodes watch ends the attempt at once: PREEMPTING (reason ``NodeFailure``), its Volcano Job
deleted, QUEUED with its submit time and its attempt history kept, and the next cycle places it
on the healthy node.
A cordon alone stops nothing: the job runs on, and moves only once the drain evicts its pods.

End to end on kubesim over HTTPS: the real watchers (jobs, pods, nodes), the real Celery
worker (eviction, dispatch), the real scheduling cycle; kubesim's clock is frozen, so every
wait here is the portal's own reaction time, never a timer of the cluster.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from clusters.models import Node
from clusters.node_failure import NODE_FAILURE_REASON
from clusters.nodes import node_trouble
from portal.jobs.attempts import job_attempts
from portal.jobs.services import job_submit
from portal.models import Job, JobEvent, JobState
from rules import volcano
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import two_a100, wait_deleted, wait_for, wait_state
from tests.conftest import job_body

S = JobState


@pytest.fixture
def sim_config() -> dict[str, Any]:
    return two_a100(defaultDurationSeconds=3600)


@pytest.fixture
def quota(vision: Any) -> None:
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=16)


def _bound(sim: Any, job: Job) -> list[str]:
    """Where the live pods of the job's current run are bound."""
    job.refresh_from_db()
    name = volcano.volcano_job_name(str(job.public_id), job.attempt_number)
    return sorted(
        p["spec"]["nodeName"]
        for p in sim.job_pods("gpupool", name)
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    )


def _running_on_one_node(sim: Any, cluster: Any, bob: Any) -> tuple[Job, str]:
    """A job of 8 GPUs, admitted by the cycle, dispatched by the worker, RUNNING on one of the
    two 8-GPU nodes; the other node is free."""
    job = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=8)).job
    assert run_cycle().admitted == [job.pk]
    wait_state(job, S.SUBMITTED)
    sim.advance(3)
    wait_state(job, S.RUNNING)
    job.refresh_from_db()
    assert _bound(sim, job) == job.node_plan and len(job.node_plan) == 1
    return job, job.node_plan[0]


def _moved_and_running_elsewhere(sim: Any, job: Job, failed: str) -> Job:
    """The portal ends the attempt, requeues the job, and runs it on the other node."""
    wait_state(job, S.PREEMPTING, S.QUEUED, S.ADMITTED, S.SUBMITTED, S.RUNNING, timeout=10)
    wait_deleted(sim, job, S.QUEUED, S.ADMITTED, S.SUBMITTED, S.RUNNING)

    def placed() -> bool:
        if Job.objects.get(pk=job.pk).state == S.QUEUED:
            run_cycle()  # the worker's cycle may have placed it already
        return Job.objects.get(pk=job.pk).state in (S.SUBMITTED, S.RUNNING)

    assert wait_for(placed), f"job stayed {Job.objects.get(pk=job.pk).state}"
    sim.advance(3)
    wait_state(job, S.RUNNING)
    job.refresh_from_db()
    other = {"a100-0": "a100-1", "a100-1": "a100-0"}[failed]
    assert job.node_plan == [other]
    assert wait_for(lambda: _bound(sim, job) == [other])
    return job


def _entered(job: Job, state: JobState) -> JobEvent:
    """The one event that moved the job into ``state`` from a running attempt (facts noted
    meanwhile stay in it; the submit's QUEUED comes from nothing)."""
    return JobEvent.objects.exclude(from_state__in=(state, "")).get(job_id=job.pk, to_state=state)


def _requeue_not_counted(job: Job, submitted_at: Any) -> None:
    """Submit time and attempt history kept; the requeue spent none of the user's budget."""
    assert job.submitted_at == submitted_at
    stop = _entered(job, S.PREEMPTING)
    assert stop.reason == NODE_FAILURE_REASON
    assert "counts against neither its retries nor its requeues" in stop.message
    requeued = _entered(job, S.QUEUED)
    assert requeued.reason == "Requeued"
    assert job.preemption_count == 0
    attempts = job_attempts(job)
    assert [(a.number, a.current) for a in attempts] == [(1, False), (2, True)]
    assert attempts[0].end_reason == "Requeued" and attempts[0].started_at is not None


def _node(ready: str = "True", **spec: Any) -> dict[str, Any]:
    return {"spec": spec, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("node", "trouble"),
    [
        (_node(), ""),
        (_node("False"), "is NotReady"),
        (_node("Unknown", taints=[UNREACHABLE]), "is NotReady"),
        ({"spec": {}, "status": {}}, "is NotReady"),
        (_node(unschedulable=True), ""),
        (_node(taints=[UNREACHABLE]), "has the taint node.kubernetes.io/unreachable:NoExecute"),
        (_node(taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]), ""),
        (_node(taints=[{"key": "maintenance", "effect": "NoSchedule"}]), ""),
    ],
    ids=[
        "a Ready node is fine",
        "NotReady",
        "Unknown: the kubelet stopped reporting",
        "no Ready condition at all",
        "cordoned: evicts nothing, the job may finish",
        "an untolerated NoExecute taint evicts",
        "the GPU taint the portal's pods tolerate",
        "NoSchedule keeps new pods away, running ones stay",
    ],
)
def test_what_makes_a_node_unfit_for_a_running_replica(node, trouble):
    assert node_trouble(node) == trouble


@pytest.mark.usefixtures("celery_worker")
@pytest.mark.django_db(transaction=True)
def test_a_job_on_a_node_that_goes_not_ready_runs_on_the_free_node_in_seconds(
    sim, cluster, quota, bob, watchers
):
    watchers.start(cluster, "jobs", "pods", "nodes")
    job, node = _running_on_one_node(sim, cluster, bob)
    submitted_at = job.submitted_at

    sim.node_not_ready(node)  # and it never comes back: no one vouches it is down either
    wait_state(job, S.PREEMPTING, timeout=10)
    job = _moved_and_running_elsewhere(sim, job, node)
    _requeue_not_counted(job, submitted_at)
    stop = _entered(job, S.PREEMPTING)
    assert f"node {node} is NotReady" in stop.message
    # The next run is a Volcano Job of its own, beside the first run's pod still Terminating.
    assert job.volcano_job_name == volcano.volcano_job_name(str(job.public_id), 2)
    assert job.volcano_job_name.endswith("-a2")
    (old,) = _pods_of(sim, job, attempt=1)
    assert old["metadata"].get("deletionTimestamp") and old["spec"]["nodeName"] == node
    (new,) = _pods_of(sim, job, attempt=2)
    env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
    assert env["GPUPOOL_ATTEMPT"] == "2"


def _cordoned_and_still_running(sim: Any, job: Job, node: str) -> None:
    """The cordon reaches the books (no new placement there) and the job keeps running."""
    sim.cordon(node)
    assert wait_for(
        lambda: not Node.objects.filter(cluster_id=job.cluster_id, name=node, schedulable=True)
    ), "the cordon never reached the inventory rows"
    time.sleep(1.0)  # the watch acted on the node within this before the change
    sim.settle()
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    assert not JobEvent.objects.filter(job_id=job.pk, to_state=S.PREEMPTING).exists()
    assert _bound(sim, job) == [node]


@pytest.mark.usefixtures("celery_worker")
@pytest.mark.django_db(transaction=True)
def test_a_cordon_alone_leaves_a_running_job_running_and_keeps_new_jobs_off_the_node(
    sim, cluster, quota, bob, watchers
):
    watchers.start(cluster, "jobs", "pods", "nodes")
    job, node = _running_on_one_node(sim, cluster, bob)
    _cordoned_and_still_running(sim, job, node)

    second = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=8)).job
    assert run_cycle().admitted == [second.pk]
    second.refresh_from_db()
    assert second.node_plan and node not in second.node_plan


@pytest.mark.usefixtures("celery_worker")
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_pods_a_drain_evicts_from_a_cordoned_node_runs_on_the_free_node_in_seconds(
    sim, cluster, quota, bob, watchers
):
    watchers.start(cluster, "jobs", "pods", "nodes")
    job, node = _running_on_one_node(sim, cluster, bob)
    submitted_at = job.submitted_at
    _cordoned_and_still_running(sim, job, node)

    sim.drain(node)  # its pods evicted: Volcano restarts the gang, pinned to the cordoned node
    sim.advance(float(sim.config.simulation.pod_termination_seconds))  # their grace period
    job = _moved_and_running_elsewhere(sim, job, node)
    _requeue_not_counted(job, submitted_at)
    stop = _entered(job, S.PREEMPTING)
    assert f"node {node} is cordoned (drain) and its pods were evicted" in stop.message


@pytest.mark.usefixtures("celery_worker")
@pytest.mark.django_db(transaction=True)
def test_the_inventory_sync_moves_a_job_off_a_node_that_failed_while_no_watch_ran(
    sim, cluster, quota, bob, watchers
):
    from clusters.tasks import sync_inventory

    watchers.start(cluster)  # jobs and pods only: the node's change is not seen as it happens
    job, node = _running_on_one_node(sim, cluster, bob)
    submitted_at = job.submitted_at
    # Its pods are evicted and Volcano restarts the gang; the books still call the node Ready,
    # so nothing moves the job until the inventory sync reads the node.
    sim.node_not_ready(node)
    sim.advance(1)
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    sync_inventory(cluster.pk)  # the beat's task, run here: no slot is awaited
    wait_state(job, S.PREEMPTING, timeout=10)
    job = _moved_and_running_elsewhere(sim, job, node)
    _requeue_not_counted(job, submitted_at)


def _pods_of(sim: Any, job: Job, attempt: int = 1) -> list[dict[str, Any]]:
    return sim.job_pods("gpupool", volcano.volcano_job_name(str(job.public_id), attempt))


def _used_by_others(job: Job, node: str) -> int:
    row = Node.objects.get(cluster_id=job.cluster_id, name=node)
    return row.gpus_used_by_others if row.ready else -1


def _note(job: Job) -> JobEvent | None:
    return JobEvent.objects.filter(job_id=job.pk, reason="PodsLeftTerminating").first()


@pytest.mark.usefixtures("celery_worker")
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_node_died_runs_elsewhere_beside_its_terminating_pods_until_the_node_returns(
    sim, cluster, quota, bob, watchers
):
    """A real cluster cannot finish deleting pods on an unreachable node: they stay
    Terminating until it comes back. The stop does not wait for them (the next run's pods
    have names of their own), says so once, and the pods' late end changes nothing of the new
    run: its plan, its state, its timeline."""
    from clusters.tasks import sync_inventory

    watchers.start(cluster, "jobs", "pods", "nodes")
    job, node = _running_on_one_node(sim, cluster, bob)
    old_uids = {p["metadata"]["uid"] for p in _pods_of(sim, job)}

    sim.node_not_ready(node)
    job = _moved_and_running_elsewhere(sim, job, node)
    left = _pods_of(sim, job)
    assert {p["metadata"]["uid"] for p in left} == old_uids
    assert all(p["metadata"].get("deletionTimestamp") for p in left)
    note = _note(job)
    assert note, "the job never said why its old pods were left behind"
    assert f"stay Terminating on unreachable node {node}" in note.message
    assert "requeued without waiting for them" in note.message
    assert "node.kubernetes.io/out-of-service" in note.message
    events_before = JobEvent.objects.filter(job_id=job.pk).count()
    plan = job.node_plan

    sim.node_ready(node)  # its kubelet stops the old pods, within their grace period
    # Meanwhile they hold the node's GPUs, which no job's books count any more: the inventory,
    # read again as the node comes back, counts them as another's, so no cycle offers them.
    assert wait_for(lambda: _used_by_others(job, node) == 8, timeout=10), (
        "the returned node's GPUs were offered while its old pods held them"
    )
    sim.advance(float(sim.config.simulation.pod_termination_seconds) + 1)
    assert wait_for(lambda: not _pods_of(sim, job)), "the first run's pods never went"
    sync_inventory(job.cluster_id)
    assert _used_by_others(job, node) == 0
    sim.settle()
    time.sleep(1.0)  # the watchers deliver the pods' deletion
    job.refresh_from_db()
    assert job.state == S.RUNNING and job.node_plan == plan
    assert _bound(sim, job) == plan
    assert JobEvent.objects.filter(job_id=job.pk).count() == events_before
    assert JobEvent.objects.filter(job_id=job.pk, reason="PodsLeftTerminating").count() == 1
    _requeue_not_counted(job, job.submitted_at)
