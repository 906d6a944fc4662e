"""An attempt's logs outlive its pods: before the portal deletes them (a preemption, a cancel)
it keeps each replica's last lines, which the attempt's page and API show afterwards."""

from __future__ import annotations

import pytest

from portal import hooks
from portal.jobs.services import job_cancel
from portal.jobs.state import job_transition
from portal.models import AttemptLog, Job, JobState
from tests.clusters.conftest import dispatch, wait_deleted, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture
def running(sim, cluster, admit, watchers):
    watchers.start(cluster)
    job = admit(cluster, replicas=2, gpus_per_replica=1)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    sim.advance(40)  # kubesim writes a log line every 10 simulated seconds
    return Job.objects.get(pk=job.pk)


def test_a_preempted_attempt_keeps_its_logs(sim, running, api_as, client, bob):
    assert job_transition(
        job_id=running.pk,
        expected=JobState.RUNNING,
        to=JobState.PREEMPTING,
        reason="Preempted",
        message="Preempted for language's job (within its nominal quota).",
    )
    for hook in hooks.preempted.listeners:  # what the cycle does on commit
        hook([running.pk])
    wait_deleted(sim, running, JobState.QUEUED)
    kept = list(AttemptLog.objects.filter(job=running).order_by("replica"))
    assert [(k.attempt, k.replica) for k in kept] == [(1, 0), (1, 1)]
    assert all(k.text.strip() and not k.message for k in kept)
    assert kept[0].pod.endswith("-master-0") and kept[1].pod.endswith("-worker-0")

    attempt = api_as(bob).get(f"/api/v1/jobs/{running.public_id}/attempts/1/").json()
    assert attempt["end_reason"] == "Preempted" and attempt["cluster"] == running.cluster.name
    assert [log["text"] for log in attempt["logs"]] == [k.text for k in kept]
    client.force_login(bob)
    page = client.get(f"/jobs/{running.public_id}/attempts/1/").content.decode()
    assert kept[0].text.strip().splitlines()[-1] in page


def test_a_cancelled_run_keeps_its_logs_once(sim, running, bob):
    job_cancel(job=running, by=bob, reason="wrong data set")
    wait_deleted(sim, running, JobState.CANCELLED)
    kept = AttemptLog.objects.filter(job=running)
    assert kept.count() == 2 and all(k.attempt == 1 for k in kept)
