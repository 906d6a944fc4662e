"""A team the scheduler admits can run: its Volcano queue and namespace exist on the cluster
before (or, repaired, by the time) its job is created, also after the cluster lost its state.

Real kubesim over HTTPS, the real Celery worker, the real scheduling cycle.
"""

from __future__ import annotations

import pytest

from clusters.inventory import inventory_sync
from clusters.queues import queues_sync
from portal.jobs.services import job_submit
from portal.models import JobEvent, JobState
from rules import volcano
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import dispatch, state_of, wait_for, wait_state
from tests.conftest import job_body

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _caps(queue):
    return {k: str(v) for k, v in (queue["spec"].get("capability") or {}).items()}


def _reasons(job):
    return list(
        JobEvent.objects.filter(job_id=job.pk)
        .order_by("created_at", "id")
        .values_list("reason", flat=True)
    )


@pytest.fixture
def lender(language):
    """Language owns 16 idle A100s in the default cohort, which vision (no row) may borrow.
    bulk_create sends no signal: no queue sync is requested behind the test's back."""
    model = GpuModel.objects.get(key="a100-80gb")
    Quota.objects.bulk_create([Quota(team=language, gpu_model=model, nominal=16)])
    return language


@pytest.fixture
def bare_cluster(sim, register, vision):
    """kubesim registered and its inventory read, but no queue synced yet."""
    cluster = register(sim)
    assert inventory_sync(cluster=cluster).ok
    return cluster


def _submit_and_admit(bob):
    job = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=4)).job
    result = run_cycle()  # on commit, the admission goes to the worker (hooks.admitted)
    assert result.admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement["borrowed_gpus"] == 4  # admitted on borrowed quota
    return job


def test_the_queue_sync_gives_a_team_without_quota_the_queue_the_engine_admits_it_to(
    sim, bare_cluster, lender, bob
):
    result = queues_sync(cluster=bare_cluster)
    assert "gp-vision" in result.applied
    # Its capability is what the engine could give it: language's 16 idle A100s.
    assert _caps(sim.get("queues", "gp-vision")) == {"nvidia.com/gpu": "16"}
    job = _submit_and_admit(bob)
    wait_state(job, JobState.SUBMITTED)
    obj = sim.get("jobs", volcano.volcano_job_name(str(job.public_id)), "gpupool")
    assert obj["spec"]["queue"] == "gp-vision"
    assert "QueueRepair" not in _reasons(job) and "SubmitRejected" not in _reasons(job)


def test_a_job_admitted_before_any_queue_sync_gets_its_queue_at_dispatch(
    sim, bare_cluster, lender, bob
):
    """The regression: the engine admits vision on borrowed quota, the webhook refuses the
    job for want of gp-vision; the portal syncs the queues and the create goes through."""
    assert sim.get("queues", "gp-vision") is None
    job = _submit_and_admit(bob)
    wait_state(job, JobState.SUBMITTED)
    assert sim.get("queues", "gp-vision") is not None
    reasons = _reasons(job)
    assert "QueueRepair" in reasons and "SubmitRejected" not in reasons
    assert len(sim.list("jobs", "gpupool")) == 1  # one Volcano Job, never two


def test_after_the_cluster_lost_its_state_running_jobs_say_so_and_new_ones_run(
    sim, cluster, admit, watchers
):
    """The API server restarted empty: queues and namespaces gone. The running job ends
    FAILED saying the cluster lost its Volcano Job; jobs dispatched afterwards make the
    namespace and the queue again and run, each created once."""
    watchers.start(cluster)
    running = admit(cluster, name="before")
    dispatch(running)
    assert wait_for(lambda: state_of(running) != JobState.ADMITTED)
    assert state_of(running) == JobState.SUBMITTED, list(
        JobEvent.objects.filter(job_id=running.pk).values_list("reason", "message")
    )
    sim.advance(3)  # the pod starts
    wait_state(running, JobState.RUNNING)

    assert "gpupool" in sim.lose_state()
    sim.advance(5)  # the namespace's pods terminate; the namespace goes
    assert sim.get("namespaces", "gpupool") is None and sim.get("queues", "gp-vision") is None
    wait_state(running, JobState.FAILED)
    lost = JobEvent.objects.filter(job_id=running.pk, reason="VolcanoJobDeleted").get()
    assert "lost the Volcano Job" in lost.message and "not requeued" in lost.message

    # The queue sync needs to know vision may run: the fixture's queue came from no quota.
    Quota.objects.bulk_create(
        [Quota(team=running.team, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)]
    )
    after = [admit(cluster, name=f"after-{i}") for i in range(3)]
    dispatch(*after)
    for job in after:
        wait_state(job, JobState.SUBMITTED)
    assert sim.get("namespaces", "gpupool") is not None
    assert sim.get("queues", "gp-vision") is not None
    names = {o["metadata"]["name"] for o in sim.list("jobs", "gpupool")}
    assert names == {volcano.volcano_job_name(str(j.public_id)) for j in after}
    assert all("SubmitRejected" not in _reasons(j) for j in after)


def test_the_periodic_queue_sync_remakes_lost_queues_and_namespaces(sim, cluster, vision):
    Quota.objects.bulk_create(
        [Quota(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8)]
    )
    sim.lose_state()
    sim.advance(5)
    assert wait_for(lambda: sim.get("namespaces", "gpupool") is None)
    result = queues_sync(cluster=cluster)
    assert result.ok and "gp-vision" in result.applied, result.message
    assert sim.get("namespaces", "gpupool") is not None
    assert _caps(sim.get("queues", "gp-vision")) == {"nvidia.com/gpu": "8"}


def test_a_team_the_engine_cannot_admit_on_a_cluster_gets_no_queue_and_fails_saying_why(
    sim, bare_cluster, admit
):
    """No quota anywhere in its cohort: no queue, so a job admitted by hand regardless is
    refused after one repair, with the webhook's words."""
    job = admit(bare_cluster)
    dispatch(job)
    wait_state(job, JobState.FAILED)
    assert sim.get("queues", "gp-vision") is None
    assert _reasons(job)[-2:] == ["QueueRepair", "SubmitRejected"]
