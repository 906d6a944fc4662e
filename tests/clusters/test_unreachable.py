"""A cluster the portal cannot reach is no verdict on the jobs sent to it.

A TLS handshake refused (the API server came back with a new CA), a connection refused, a host
name that does not resolve: every job dispatched meanwhile used to end FAILED
``SubmitRejected`` (or ``DispatchFailed`` once its attempts were spent). Now each such job
stays ADMITTED and is tried again after a wait that grows with the outage, however many times,
without spending its attempts; the cluster is shown unreachable until a call gets through,
and then the job goes through.

Nor does the scheduler send new work there: an unreachable cluster gets no admissions (the
job runs on a cluster that answers, or waits QUEUED saying why), and a job admitted to it whose
create certainly never reached it (every attempt refused before sending) goes back to the
queue once the outage outlasts ``GPUPOOL_UNREACHABLE_REQUEUE_MINUTES``. A job whose create may
have gone through (the answer lost to a timeout) stays bound, and is adopted once it is back.

Dispatch runs here in the test's process, attempt after attempt (what the worker's retries
do, without their waits), against kubesim over HTTPS.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from clusters.clients import clusters_forget_clients
from clusters.dispatch import job_dispatch, job_dispatch_batch
from clusters.kubeconfig import parse_kubeconfig
from clusters.models import Cluster
from clusters.queues import TeamQueue, queues_sync
from clusters.registration import cluster_register
from clusters.tasks import cluster_reconcile_and_enqueue
from kubesim import KubeSim
from portal.jobs.services import job_submit
from portal.models import Job, JobAttempt, JobEvent, JobState
from rules import volcano
from scheduling.cycle import run_cycle
from scheduling.models import GpuModel, Quota
from tests.clusters.conftest import (
    MAX_ATTEMPTS,
    SMALL,
    TIMEOUT_SECONDS,
    kubeconfig_text,
    state_of,
    wait_for,
)
from tests.conftest import job_body

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = MAX_ATTEMPTS + 3  # more than a job's attempts: none may be spent on the cluster's fault


def _attempts_while_down(job: Any) -> list[str]:
    """Dispatch ``TRIES`` times; each must come back "try again later", never a verdict."""
    messages = []
    for _ in range(TRIES):
        outcome = job_dispatch(job_id=job.pk)
        assert not outcome.done and outcome.retry_in, outcome
        messages.append(outcome.message)
    assert state_of(job) == JobState.ADMITTED
    job.refresh_from_db()
    assert job.dispatch_attempts == 0  # nothing spent: a later 5xx still gets every attempt
    return messages


def _unreachable(cluster: Cluster) -> Cluster:
    cluster.refresh_from_db()
    assert not cluster.reachable
    assert cluster.unreachable_since is not None
    return cluster


def _goes_through(job: Any, cluster: Cluster) -> None:
    assert job_dispatch(job_id=job.pk).done
    assert state_of(job) == JobState.SUBMITTED
    cluster.refresh_from_db()
    assert cluster.reachable and cluster.unreachable_error == ""


def _same_port(sim: KubeSim, *, same_ca: bool) -> KubeSim:
    """kubesim again on ``sim``'s port, empty, with its CA or a new one."""
    port = sim.port
    sim.stop()
    again = KubeSim(sim.config, port=port, clock_speed=0)
    if same_ca:
        again._certs = sim._certs
    return again.start()


def test_a_cluster_back_with_a_new_ca_fails_no_job_and_is_shown_unreachable(
    sim, cluster, admit, api_as, bob, root
):
    job = admit(cluster)
    renewed = _same_port(sim, same_ca=False)
    try:
        messages = _attempts_while_down(job)
        assert all("TLS certificate is not signed by the registered CA" in m for m in messages)
        cluster = _unreachable(cluster)
        assert "TLS" in cluster.unreachable_error
        retries = JobEvent.objects.filter(job_id=job.pk, reason="DispatchRetry")
        assert retries.count() == TRIES
        assert "not counted against the job's attempts" in retries.last().message
        # Everyone sees it unhealthy; platform admins also see why.
        listed = api_as(bob).get("/api/v1/clusters/").json()
        rows = listed["results"] if isinstance(listed, dict) else listed
        assert [(c["name"], c["reachable"]) for c in rows] == [("sim", False)]
        assert "unreachable_error" not in rows[0]
        detail = api_as(root).get("/api/v1/clusters/sim/").json()
        assert "TLS" in detail["unreachable_error"]

        # The admin registers the new CA: the next attempt goes through.
        credentials = parse_kubeconfig(kubeconfig_text(renewed))
        cluster, _ = cluster_register(name="sim", credentials=credentials, update=True)
        queues_sync(cluster=cluster, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
        _goes_through(job, cluster)
    finally:
        renewed.stop()


def test_a_refused_connection_fails_no_job_and_the_job_goes_through_once_it_is_back(
    sim, cluster, admit
):
    job = admit(cluster)
    port, certs = sim.port, sim._certs
    sim.stop()  # nothing listens: every connection is refused
    messages = _attempts_while_down(job)
    assert all("unreachable" in m for m in messages)
    assert "unreachable" in _unreachable(cluster).unreachable_error

    back = KubeSim(sim.config, port=port, clock_speed=0)
    back._certs, back.token = certs, sim.token
    back.auth.add(sim.token, "cluster-admin", user="kubesim-admin")
    with back.start():
        queues_sync(cluster=cluster, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
        _goes_through(job, cluster)


def test_a_host_name_that_does_not_resolve_fails_no_job(sim, cluster, admit):
    job = admit(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(api_url="https://gpupool-nowhere.invalid:6443")
    clusters_forget_clients()
    messages = _attempts_while_down(job)
    assert all("resolve" in m for m in messages), messages
    assert "resolve" in _unreachable(cluster).unreachable_error


def test_the_reconcile_marks_an_unreachable_cluster_and_clears_the_mark_when_it_answers(
    sim, cluster
):
    port, certs, token = sim.port, sim._certs, sim.token
    sim.stop()
    assert not cluster_reconcile_and_enqueue(cluster=cluster).ok
    cluster = _unreachable(cluster)
    back = KubeSim(sim.config, port=port, clock_speed=0)
    back._certs = certs
    back.auth.add(token, "cluster-admin", user="kubesim-admin")
    with back.start():
        assert cluster_reconcile_and_enqueue(cluster=cluster).ok
    cluster.refresh_from_db()
    assert cluster.reachable


# ---------------------------------------------------------------------------------------------
# Steering: nothing new for an unreachable cluster; what never reached it goes elsewhere
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def other(register):
    """A second kubesim, registered as ``other``, with Vision's queue."""
    from clusters.inventory import inventory_sync

    with KubeSim(SMALL, clock_speed=0) as server:
        registered = register(server, name="other")
        assert inventory_sync(cluster=registered).ok
        queues_sync(cluster=registered, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
        registered.refresh_from_db()
        yield server, registered


@pytest.fixture
def quota(vision):
    Quota.objects.create(team=vision, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=16)


def _refused(sim: KubeSim, cluster: Cluster) -> Cluster:
    """Stop ``sim`` (every connection refused) and let the reconcile find out."""
    sim.stop()
    assert not cluster_reconcile_and_enqueue(cluster=cluster).ok
    return _unreachable(cluster)


def _submit(bob: Any) -> Any:
    return job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=4)).job


def _backdate_outage(cluster: Cluster, minutes: float) -> None:
    since = timezone.now() - dt.timedelta(minutes=minutes)
    Cluster.objects.filter(pk=cluster.pk).update(unreachable_since=since)


def test_the_cycle_admits_nothing_to_an_unreachable_cluster_and_uses_one_that_answers(
    sim, cluster, other, quota, bob
):
    _, elsewhere = other
    _refused(sim, cluster)
    jobs = [_submit(bob) for _ in range(3)]  # 12 GPUs: "sim" alone would have fitted them all
    assert sorted(run_cycle().admitted) == sorted(j.pk for j in jobs)
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("cluster__name", flat=True)
    ) == {elsewhere.name}
    placement = Job.objects.get(pk=jobs[0].pk).placement
    notes = {n["cluster"]: n["message"] for n in placement["clusters"]}
    assert "cannot be reached" in notes["sim"], placement


def test_a_job_whose_only_cluster_is_unreachable_waits_queued_saying_so_and_runs_once_it_is_back(
    sim, cluster, quota, bob
):
    port, certs, token = sim.port, sim._certs, sim.token
    _refused(sim, cluster)
    job = _submit(bob)
    assert run_cycle().admitted == []
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert job.pending_reason_code == "CLUSTER_UNREACHABLE"
    assert "its clusters cannot be reached (sim)" in job.pending_reason

    back = KubeSim(sim.config, port=port, clock_speed=0)
    back._certs = certs
    back.auth.add(token, "cluster-admin", user="kubesim-admin")
    with back.start():
        queues_sync(cluster=cluster, desired=[TeamQueue("vision", 100, {"nvidia.com/gpu": 64})])
        assert cluster_reconcile_and_enqueue(cluster=cluster).ok  # the mark is cleared
        assert run_cycle().admitted == [job.pk]
        assert job_dispatch(job_id=job.pk).done
        assert state_of(job) == JobState.SUBMITTED
        assert len(back.list("jobs")) == 1


def test_a_job_never_created_on_a_cluster_unreachable_past_the_grace_is_requeued_and_runs_elsewhere(
    sim, cluster, other, admit, quota, settings
):
    settings.GPUPOOL_UNREACHABLE_REQUEUE_MINUTES = 10
    other_sim, elsewhere = other
    job = admit(cluster, replicas=1, gpus_per_replica=4)
    sim.stop()
    # The batch path (the cycle's) and the one-job path (the retries): every connection
    # refused, so not one create reached the API server.
    assert job.pk in job_dispatch_batch(job_ids=[job.pk]).later
    _attempts_while_down(job)
    job.refresh_from_db()
    assert job.creates_unsure == 0
    cluster = _unreachable(cluster)

    # Within the grace the job keeps waiting for its cluster.
    _backdate_outage(cluster, 9)
    assert not cluster_reconcile_and_enqueue(cluster=cluster).ok
    assert state_of(job) == JobState.ADMITTED

    _backdate_outage(cluster, 11)
    assert not cluster_reconcile_and_enqueue(cluster=cluster).ok
    job.refresh_from_db()
    assert (job.state, job.cluster_id, job.gpu_model_id) == (JobState.QUEUED, None, None)
    event = JobEvent.objects.filter(job_id=job.pk).latest("created_at", "id")
    assert (event.from_state, event.to_state, event.reason) == (
        JobState.ADMITTED,
        JobState.QUEUED,
        "ClusterUnreachable",
    )
    assert "Cluster sim has not answered since" in event.message
    assert "more than the 10 min allowed" in event.message
    assert "never created there" in event.message
    # The run that never started stays on the record, with why it ended.
    attempt = JobAttempt.objects.get(job_id=job.pk)
    assert (attempt.cluster_name, attempt.end_reason) == ("sim", "ClusterUnreachable")

    # Placed again, on the cluster that answers, and created there once.
    assert run_cycle().admitted == [job.pk]
    job.refresh_from_db()
    assert job.cluster_id == elsewhere.pk
    assert job_dispatch(job_id=job.pk).done
    assert state_of(job) == JobState.SUBMITTED
    mine = [
        o
        for o in other_sim.list("jobs")
        if o["metadata"]["labels"].get(volcano.LABEL_JOB_ID) == str(job.public_id)
    ]
    assert len(mine) == 1


def test_a_job_whose_create_may_have_reached_the_cluster_stays_bound_to_it_and_is_adopted(
    sim, cluster, other, admit, quota, settings
):
    settings.GPUPOOL_UNREACHABLE_REQUEUE_MINUTES = 10
    job = admit(cluster, replicas=1, gpus_per_replica=4)
    # The create stalls past the client's timeout, then is applied: the answer was lost.
    sim.faults.add(verb="create", resource="jobs", hang=TIMEOUT_SECONDS * 2, count=1)
    outcome = job_dispatch(job_id=job.pk)
    assert not outcome.done and "did not answer in time" in outcome.message
    job.refresh_from_db()
    assert job.creates_unsure == 1
    assert wait_for(lambda: len(sim.list("jobs")) == 1, timeout=TIMEOUT_SECONDS * 3)

    # Then the API server hangs for good, long past the grace.
    sim.faults.add(verb="*", resource="*", hang=TIMEOUT_SECONDS * 2, count=-1)
    _backdate_outage(cluster, 30)
    assert not cluster_reconcile_and_enqueue(cluster=cluster).ok
    job.refresh_from_db()
    assert (job.state, job.cluster_id) == (JobState.ADMITTED, cluster.pk)  # kept: maybe there
    assert not JobEvent.objects.filter(job_id=job.pk, reason="ClusterUnreachable").exists()

    # Back: the next attempt finds the object its lost create made, and adopts it.
    sim.faults.clear()
    assert job_dispatch(job_id=job.pk).done
    assert state_of(job) == JobState.SUBMITTED
    assert JobEvent.objects.filter(job_id=job.pk, reason="Adopted").exists()
    assert len(sim.list("jobs")) == 1
    assert not other[0].list("jobs")
