"""Cancel and preemption are never silent: a cancel's reason reaches the owner on the job
page, in the timeline and over REST; owners are notified of their jobs' changes."""

from __future__ import annotations

import pytest

from portal.jobs.services import job_cancel, job_submit
from portal.jobs.state import job_transition
from portal.models import Job, JobState, Notification
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobs_job(bob, catalog):
    return job_submit(user=bob, data=job_body(name="long-run")).job


def test_a_cancel_reason_is_kept_and_shown_to_the_owner(api_as, client, alice, bob, bobs_job):
    answer = api_as(alice).post(
        f"/api/v1/jobs/{bobs_job.public_id}/cancel/",
        {"reason": "  Blocking the  quarterly eval; resubmit after Friday. "},
        format="json",
    )
    assert answer.status_code == 202, answer.json()
    said = "Blocking the quarterly eval; resubmit after Friday."
    assert answer.json()["cancel_reason"] == said
    assert api_as(bob).get(f"/api/v1/jobs/{bobs_job.public_id}/").json()["cancel_reason"] == said
    events = api_as(bob).get(f"/api/v1/jobs/{bobs_job.public_id}/events/").json()["results"]
    cancel = next(e for e in events if e["reason"] == "CancelRequested")
    assert cancel["actor"] == "alice" and said in cancel["message"]
    client.force_login(bob)
    page = client.get(f"/jobs/{bobs_job.public_id}/").content.decode()
    assert 'id="cancel-reason"' in page and "Cancelled by alice" in page and said in page


def test_a_cancel_without_a_reason_says_so(client, bob, bobs_job):
    client.force_login(bob)
    form = client.get(f"/jobs/{bobs_job.public_id}/cancel/").content.decode()
    assert 'name="reason"' in form and "optional" in form.lower()
    assert client.post(f"/jobs/{bobs_job.public_id}/cancel/", {"reason": ""}).status_code == 302
    bobs_job.refresh_from_db()
    assert bobs_job.state == JobState.CANCELLED and bobs_job.cancel_reason == ""
    page = client.get(f"/jobs/{bobs_job.public_id}/").content.decode()
    assert "no reason given" in page


def test_a_too_long_reason_is_refused_naming_the_field(api_as, client, bob, bobs_job):
    answer = api_as(bob).post(
        f"/api/v1/jobs/{bobs_job.public_id}/cancel/", {"reason": "x" * 501}, format="json"
    )
    assert answer.status_code == 400 and "reason" in answer.json()["extra"]["fields"]
    client.force_login(bob)
    page = client.post(f"/jobs/{bobs_job.public_id}/cancel/", {"reason": "y" * 501})
    assert page.status_code == 400 and 'id="id_reason_error"' in page.content.decode()
    bobs_job.refresh_from_db()
    assert bobs_job.state == JobState.QUEUED


def test_the_owner_hears_of_a_cancel_by_someone_else_but_not_of_their_own(
    alice, bob, bobs_job, catalog
):
    job_cancel(job=bobs_job, by=alice, reason="Over budget")
    mine = job_submit(user=bob, data=job_body(name="own")).job
    job_cancel(job=mine, by=bob)
    notes = list(Notification.objects.filter(user=bob))
    assert [(n.kind, n.job_id) for n in notes] == [("job.cancelled", bobs_job.pk)]
    assert "cancelled by alice" in notes[0].title and "Over budget" in notes[0].message
    assert not Notification.objects.filter(user=alice).exists()


def test_the_owner_hears_when_a_job_starts_ends_or_is_preempted(bob, bobs_job, vision):
    def move(expected, to, reason, **extra):
        assert job_transition(job_id=bobs_job.pk, expected=expected, to=to, reason=reason, **extra)

    move(JobState.QUEUED, JobState.ADMITTED, "Admitted")
    move(JobState.ADMITTED, JobState.SUBMITTED, "Submitted")
    move(JobState.SUBMITTED, JobState.RUNNING, "Running")
    move(JobState.RUNNING, JobState.PREEMPTING, "Preempted", message="Language reclaims 8 GPUs")
    move(JobState.PREEMPTING, JobState.QUEUED, "Preempted")
    move(JobState.QUEUED, JobState.ADMITTED, "Admitted")
    move(JobState.ADMITTED, JobState.SUBMITTED, "Submitted")
    move(JobState.SUBMITTED, JobState.RUNNING, "Running")
    move(JobState.RUNNING, JobState.FAILED, "VolcanoFailed", message="OOMKilled")
    kinds = list(
        Notification.objects.filter(user=bob).order_by("id").values_list("kind", flat=True)
    )
    assert kinds == ["job.running", "job.preempted", "job.running", "job.failed"]
    assert Job.objects.get(pk=bobs_job.pk).preemption_count == 1


def test_notifications_are_the_users_own_over_rest_and_in_the_pages(
    api_as, client, alice, bob, charlie, bobs_job
):
    job_cancel(job=bobs_job, by=alice, reason="Maintenance")
    listed = api_as(bob).get("/api/v1/notifications/?unread=true").json()["results"]
    assert [n["kind"] for n in listed] == ["job.cancelled"]
    assert listed[0]["job"] == str(bobs_job.public_id) and listed[0]["read_at"] is None
    assert api_as(charlie).get("/api/v1/notifications/").json()["results"] == []
    assert api_as(charlie).post(
        "/api/v1/notifications/read/", {"ids": [listed[0]["id"]]}, format="json"
    ).json() == {"marked": 0, "unread": 0}

    client.force_login(bob)
    bell = client.get("/notifications/bell/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-unread="1"' in bell
    page = client.get("/notifications/").content.decode()
    assert "was cancelled by alice" in page and "Maintenance" in page
    opened = client.get(f"/notifications/{listed[0]['id']}/")
    assert opened.status_code == 302 and opened["Location"] == f"/jobs/{bobs_job.public_id}/"
    assert "data-unread" not in client.get("/notifications/bell/").content.decode()
    client.force_login(charlie)
    assert client.get(f"/notifications/{listed[0]['id']}/").status_code == 404


def test_marking_all_read(api_as, alice, bob, catalog):
    for i in range(3):
        job_cancel(job=job_submit(user=bob, data=job_body(name=f"j{i}")).job, by=alice)
    assert api_as(bob).post("/api/v1/notifications/read/", {}, format="json").json() == {
        "marked": 3,
        "unread": 0,
    }
