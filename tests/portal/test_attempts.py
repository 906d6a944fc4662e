"""A job's attempts: every admission keeps its placement, its part of the timeline and its
kept logs after a preemption or a requeue; the job page never shows a stale placement."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.jobs.state import jobs_transition_bulk, preempting_end
from portal.models import AttemptLog, Job, JobAttempt, JobState
from scheduling.cycle import run_cycle
from tests.conftest import job_body
from tests.dashboards.conftest import kubesim_cluster, place, quota, start  # noqa: F401

pytestmark = pytest.mark.django_db

T0 = timezone.now() - dt.timedelta(hours=2)


@pytest.fixture
def east(kubesim_cluster):  # noqa: F811
    return kubesim_cluster("east")


def _preempt(job, at):
    from portal.jobs.state import job_transition

    assert job_transition(
        job_id=job.pk,
        expected=JobState.RUNNING,
        to=JobState.PREEMPTING,
        reason="Preempted",
        message="Language reclaims its nominal 8 × A100-80GB.",
        now=at,
    )
    assert preempting_end(job_id=job.pk, now=at + dt.timedelta(seconds=30))
    job.refresh_from_db()
    return job


@pytest.fixture
def preempted(bob, east):
    job = job_submit(user=bob, data=job_body(name="ddp", replicas=2, gpus_per_replica=4)).job
    # Submitted before T0: a job's events never go back before its last change.
    Job.objects.filter(pk=job.pk).update(state_changed_at=T0 - dt.timedelta(minutes=1))
    job = start(
        place(job, cluster=east, model="a100-80gb", nodes=["a100-0", "a100-1"], at=T0), at=T0
    )
    Job.objects.filter(pk=job.pk).update(
        placement={"model": "a100-80gb", "cluster": "east", "message": "Cheapest that fits."}
    )
    AttemptLog.objects.create(
        job=job, attempt=1, replica=0, pod="x-master-0", text="epoch 3 loss 0.41",
        captured_at=T0 + dt.timedelta(minutes=29),
    )  # fmt: skip
    return _preempt(job, T0 + dt.timedelta(minutes=30))


def test_a_requeue_archives_the_run_and_clears_the_row(preempted):
    attempt = JobAttempt.objects.get(job=preempted)
    assert (attempt.number, attempt.cluster_name, attempt.gpu_model_key) == (1, "east", "a100-80gb")
    assert attempt.node_plan == ["a100-0", "a100-1"] and attempt.started_at == T0
    assert attempt.end_reason == "Preempted" and "reclaims" in attempt.end_message
    assert attempt.placement["message"] == "Cheapest that fits."
    assert preempted.state == JobState.QUEUED and preempted.placement == {}
    assert preempted.cluster_id is None and preempted.preemption_count == 1


def test_the_api_lists_each_attempt_and_its_kept_logs(api_as, bob, charlie, preempted, east):
    url = f"/api/v1/jobs/{preempted.public_id}/attempts/"
    listed = api_as(bob).get(url).json()
    assert [(a["number"], a["current"], a["end_reason"]) for a in listed] == [
        (1, False, "Preempted")
    ]
    again = place(preempted, cluster=east, model="a100-80gb", nodes=["a100-1", "a100-1"], at=T0)
    listed = api_as(bob).get(url).json()
    assert [(a["number"], a["current"], a["node_plan"]) for a in listed] == [
        (1, False, ["a100-0", "a100-1"]),
        (2, True, ["a100-1", "a100-1"]),
    ]
    first = api_as(bob).get(f"{url}1/").json()
    assert first["logs"][0]["text"] == "epoch 3 loss 0.41"
    assert api_as(bob).get(f"{url}3/").status_code == 404
    assert api_as(charlie).get(url).status_code == 404
    assert again.state == JobState.ADMITTED


def test_the_job_page_shows_attempts_and_no_stale_placement(client, bob, preempted):
    client.force_login(bob)
    page = client.get(f"/jobs/{preempted.public_id}/").content.decode()
    assert 'id="placement"' not in page  # no "Why a100 on east" for a job waiting again
    assert "not assigned yet" in page
    assert 'id="attempts"' in page and "Preempted" in page
    assert "preempted ×1" in page
    attempt = client.get(f"/jobs/{preempted.public_id}/attempts/1/").content.decode()
    assert "a100-0, a100-1" in attempt and "epoch 3 loss 0.41" in attempt
    assert "Cheapest that fits." in attempt and "reclaims" in attempt
    listing = client.get("/jobs/").content.decode()
    assert "preempted ×1" in listing
    assert client.get(f"/jobs/{preempted.public_id}/attempts/9/").status_code == 404


def test_the_queue_badges_a_preempted_job(client, bob, preempted):
    client.force_login(bob)
    assert "preempted ×1" in client.get("/queue/").content.decode()


def test_an_attempts_timeline_is_its_own(client, bob, preempted, east):
    later = T0 + dt.timedelta(hours=1)
    start(
        place(preempted, cluster=east, model="a100-80gb", nodes=["a100-0"] * 2, at=later), at=later
    )
    client.force_login(bob)
    first = client.get(f"/jobs/{preempted.public_id}/attempts/1/").content.decode()
    second = client.get(f"/jobs/{preempted.public_id}/attempts/2/").content.decode()
    timeline = first[first.index("Timeline of this attempt") :]
    assert "PREEMPTING" in timeline and timeline.count("RUNNING") == 2  # → RUNNING, RUNNING →
    assert "Preempted" not in second[second.index("Timeline of this attempt") :]


def test_a_cycle_readmits_and_the_placement_is_the_new_one(
    bob,
    vision,
    east,
    preempted,
    quota,  # noqa: F811
):
    quota(vision, "a100-80gb", nominal=16)
    result = run_cycle()
    assert preempted.pk in result.admitted
    preempted.refresh_from_db()
    assert preempted.placement["cluster"] == "east" and preempted.state == JobState.ADMITTED
    assert JobAttempt.objects.filter(job=preempted).count() == 1


def test_bulk_transitions_refuse_changes_that_archive_or_notify(preempted):
    with pytest.raises(ValueError, match="only"):
        jobs_transition_bulk(
            changes=[], expected=JobState.PREEMPTING, to=JobState.QUEUED, reason="x"
        )
