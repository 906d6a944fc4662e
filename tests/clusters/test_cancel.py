"""Cancel at every state, and preemption: the Volcano Job goes, the job ends or is requeued."""

from __future__ import annotations

import pytest

from portal import hooks
from portal.errors import Conflict
from portal.jobs.services import job_cancel
from portal.jobs.state import job_transition
from portal.models import Job, JobEvent, JobState
from rules import volcano
from tests.clusters.conftest import (
    dispatch,
    state_of,
    vcjob_name,
    wait_deleted,
    wait_for,
    wait_state,
)
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _name(job):
    return vcjob_name(job)


def _gone(sim, job):
    return wait_for(lambda: sim.get("jobs", _name(job), "gpupool") is None, timeout=10)


def test_cancelling_a_queued_job_needs_no_cluster(bob, vision):
    job = JobFactory(team=vision, owner=bob)
    job_cancel(job=job, by=bob)
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED


def test_cancelling_an_admitted_job_before_dispatch(sim, cluster, admit, bob):
    job = admit(cluster)  # never handed to the dispatcher
    job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    wait_state(job, JobState.CANCELLED)
    dispatch(job)  # a late dispatch message finds nothing to do
    assert not wait_for(lambda: sim.list("jobs", "gpupool"), timeout=1)


def test_cancelling_a_submitted_job_deletes_its_volcano_job(sim, cluster, admit, api_as, bob):
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    answer = api_as(bob).post(f"/api/v1/jobs/{job.public_id}/cancel/")
    assert answer.status_code == 202 and answer.json()["state"] == JobState.CANCELLING
    wait_deleted(sim, job, JobState.CANCELLED)
    assert _gone(sim, job)
    last = JobEvent.objects.filter(job_id=job.pk).order_by("-id").first()
    assert (last.reason, last.message) == ("Cancelled", "The Volcano Job was deleted.")


def test_a_cancel_the_api_server_fails_is_retried_until_the_volcano_job_is_gone(
    sim, cluster, admit, bob
):
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    sim.faults.add(verb="delete", resource="jobs", status=503, count=2)
    job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    wait_deleted(sim, job, JobState.CANCELLED)
    assert _gone(sim, job)
    assert sim.faults.count(verb="delete", resource="jobs") == 2


def test_a_lost_cancel_message_is_finished_by_the_reconcile(sim, cluster, admit):
    import datetime as dt

    from clusters.tasks import cluster_reconcile_and_enqueue

    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    # CANCELLING, but the message that should delete its Volcano Job never arrived.
    assert job_transition(
        job_id=job.pk, expected=JobState.SUBMITTED, to=JobState.CANCELLING, reason="CancelRequested"
    )
    Job.objects.filter(pk=job.pk).update(
        state_changed_at=Job.objects.get(pk=job.pk).state_changed_at - dt.timedelta(minutes=5)
    )
    assert sim.get("jobs", _name(job), "gpupool") is not None
    assert cluster_reconcile_and_enqueue(cluster=cluster).ok
    wait_deleted(sim, job, JobState.CANCELLED)
    assert _gone(sim, job)


def test_a_finished_job_cannot_be_cancelled(sim, cluster, admit, bob):
    job = admit(cluster)
    assert job_transition(
        job_id=job.pk, expected=JobState.ADMITTED, to=JobState.FAILED, reason="SubmitRejected"
    )
    with pytest.raises(Conflict, match="already FAILED"):
        job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    assert Job.objects.get(pk=job.pk).state == JobState.FAILED


def test_cancelling_a_running_job_stops_its_pods(sim, cluster, admit, bob, watchers):
    watchers.start(cluster)
    job = admit(cluster, replicas=2, gpus_per_replica=2)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    sim.advance(3)
    wait_state(job, JobState.RUNNING)
    job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    # Deleted in the foreground: while its pods terminate the job is still CANCELLING, and
    # its GPUs still counted as taken on its nodes.
    assert wait_for(
        lambda: sim.get("jobs", _name(job), "gpupool")["metadata"].get("deletionTimestamp")
    )
    assert sim.job_pods("gpupool", _name(job))
    assert state_of(job) == JobState.CANCELLING
    assert Job.objects.get(pk=job.pk).node_plan
    wait_deleted(sim, job, JobState.CANCELLED)
    assert _gone(sim, job)
    assert not sim.job_pods("gpupool", _name(job))


def test_a_preempting_job_cannot_be_cancelled_but_is_requeued(sim, cluster, admit, bob):
    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    assert job_transition(
        job_id=job.pk,
        expected=JobState.SUBMITTED,
        to=JobState.PREEMPTING,
        reason="Preempted",
        message="Preempted for language's job (within its nominal quota).",
    )
    with pytest.raises(Conflict):
        job_cancel(job=Job.objects.get(pk=job.pk), by=bob)
    for hook in hooks.preempted.listeners:  # what the cycle does on commit
        hook([job.pk])
    # Until its pods are gone the victim stays PREEMPTING on its node: the GPUs it frees
    # are not offered to anyone before the cluster has them back.
    assert wait_for(
        lambda: sim.get("jobs", _name(job), "gpupool")["metadata"].get("deletionTimestamp")
    )
    assert sim.job_pods("gpupool", _name(job))
    preempting = Job.objects.get(pk=job.pk)
    assert preempting.state == JobState.PREEMPTING and preempting.node_plan
    wait_deleted(sim, job, JobState.QUEUED)
    assert _gone(sim, job)
    requeued = Job.objects.get(pk=job.pk)
    assert requeued.cluster_id is None and requeued.node_plan == []
    last = JobEvent.objects.filter(job_id=job.pk).order_by("-id").first()
    assert last.reason == "Preempted"
    assert last.message == "Preempted for language's job (within its nominal quota)."


def test_a_requeued_job_is_dispatched_again_under_a_new_submission_uid(sim, cluster, admit):
    from clusters.manifests import submission_uid

    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    first = submission_uid(Job.objects.get(pk=job.pk))
    job_transition(job_id=job.pk, expected=JobState.SUBMITTED, to=JobState.PREEMPTING,
                   reason="Preempted", message="m")  # fmt: skip
    for hook in hooks.preempted.listeners:
        hook([job.pk])
    wait_deleted(sim, job, JobState.QUEUED)
    from scheduling.models import GpuModel

    job_transition(
        job_id=job.pk,
        expected=JobState.QUEUED,
        to=JobState.ADMITTED,
        reason="Admitted",
        updates={
            "cluster_id": cluster.pk,
            "gpu_model_id": GpuModel.objects.get(key="a100-80gb").pk,
            "node_plan": ["a100-1"],
        },
    )
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    again = Job.objects.get(pk=job.pk)
    obj = sim.get("jobs", _name(job), "gpupool")
    assert obj["metadata"]["annotations"][volcano.ANNOTATION_SUBMISSION_UID] == submission_uid(
        again
    )
    assert submission_uid(again) != first


def _second_run_admitted(sim, job) -> Job:
    """The job's first run, SUBMITTED with its record, ended and requeued (its Volcano Job
    gone); then admitted again: the record is still the first run's."""
    from django.utils import timezone

    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    first = _name(job)
    assert job_transition(
        job_id=job.pk, expected=JobState.SUBMITTED, to=JobState.PREEMPTING, reason="Preempted"
    )
    for hook in hooks.preempted.listeners:  # what the cycle does on commit
        hook([job.pk])
    wait_deleted(sim, job, JobState.QUEUED)
    assert sim.get("jobs", first, "gpupool") is None
    before = Job.objects.get(pk=job.pk)
    assert job_transition(
        job_id=job.pk,
        expected=JobState.QUEUED,
        to=JobState.ADMITTED,
        reason="Admitted",
        updates={
            "cluster_id": before.cluster_id or job.cluster_id,
            "gpu_model_id": job.gpu_model_id,
            "node_plan": job.node_plan,
        },
        now=timezone.now(),
    )
    return Job.objects.get(pk=job.pk)


def test_a_stop_of_a_run_whose_create_went_unrecorded_deletes_that_runs_volcano_job(
    sim, cluster, admit, bob
):
    """Each run has a Volcano Job of its own name: a stop that looked only at the record (the
    last run's) would find nothing to delete and leave this run's object running."""
    from clusters.manifests import job_manifest

    job = admit(cluster)
    job = _second_run_admitted(sim, job)
    assert job.attempt_number == 2 and job.volcano.name == volcano.volcano_job_name(
        str(job.public_id)
    )
    # Its create reached the cluster; the answer never came back (no record written).
    namespace, manifest = job_manifest(job)
    sim.create(manifest, namespace)
    second = volcano.volcano_job_name(str(job.public_id), 2)
    assert sim.get("jobs", second, namespace) is not None

    job_cancel(job=job, by=bob)
    wait_deleted(sim, job, JobState.CANCELLED)
    assert _gone(sim, job), f"{second} was left on the cluster"


def test_the_reconcile_does_not_fail_a_job_that_started_a_new_run_while_it_listed(
    sim, cluster, admit
):
    """A reconcile reads the jobs, then lists the cluster. A job it read on its first run was
    requeued and started again meanwhile: judged on the run it read, the job looks gone."""
    from clusters.status import job_status_apply

    job = admit(cluster)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)
    read = Job.objects.select_related("volcano", "cluster", "team").get(pk=job.pk)
    job = _second_run_admitted(sim, job)
    dispatch(job)
    wait_state(job, JobState.SUBMITTED)

    job_status_apply(job=read, view=None, deleted=True)  # the first run's object: gone

    assert state_of(job) == JobState.SUBMITTED
    assert not JobEvent.objects.filter(job_id=job.pk, reason="VolcanoJobDeleted").exists()
