"""Team jobs for a team admin: owner filter, name search, sort, how long each ran, and bulk
cancel with one reason that lands on every job's timeline. One team never touches another
team's jobs: ids of another team's jobs are skipped, never cancelled or named."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.utils import timezone

from portal.models import JobEvent, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _names(html: str) -> list[str]:
    return re.findall(r'<td><a href="/jobs/[0-9a-f-]+/">([^<]+)</a></td>', html)


def test_owner_filter_name_search_and_sort(alice, bob, vision):
    now = timezone.now()
    JobFactory(team=vision, owner=bob, name="bert-small")
    JobFactory(
        team=vision,
        owner=alice,
        name="resnet-long",
        state=JobState.SUCCEEDED,
        started_at=now - dt.timedelta(hours=3, minutes=5),
        finished_at=now,
    )
    JobFactory(
        team=vision,
        owner=bob,
        name="bert-large",
        state=JobState.RUNNING,
        started_at=now - dt.timedelta(minutes=14),
    )
    client = _as(alice)
    assert _names(client.get("/jobs/?scope=team&owner=bob").content.decode()) == [
        "bert-large",
        "bert-small",
    ]
    assert _names(client.get("/jobs/?scope=team&q=BERT").content.decode()) == [
        "bert-large",
        "bert-small",
    ]
    assert _names(client.get("/jobs/?scope=team&sort=name").content.decode()) == [
        "bert-large",
        "bert-small",
        "resnet-long",
    ]
    page = client.get("/jobs/?scope=team&sort=duration").content.decode()
    assert _names(page) == ["resnet-long", "bert-large", "bert-small"]
    assert "<td>3 h 05 min</td>" in page and "<td>14 min</td>" in page
    assert 'id="no-match"' in client.get("/jobs/?scope=team&q=nothing-like-it").content.decode()


def test_bulk_cancel_cancels_only_the_admins_teams_jobs_with_the_reason(
    alice, bob, vision, charlie, language
):
    ours = [JobFactory(team=vision, owner=bob, name=f"ours-{i}") for i in range(2)]
    theirs = JobFactory(team=language, owner=charlie, name="theirs")
    page = _as(alice).post(
        "/jobs/cancel/",
        {
            "job": [str(j.public_id) for j in [*ours, theirs]] + ["not-a-uuid"],
            "reason": "Maintenance window at 18:00",
            "next": "/jobs/?scope=team",
        },
        follow=True,
    )
    html = page.content.decode()
    assert "Cancelled 2 jobs. 2 not cancelled" in html
    assert "theirs" not in html
    for job in ours:
        job.refresh_from_db()
        assert job.state == JobState.CANCELLED
        assert job.cancel_reason == "Maintenance window at 18:00"
        said = JobEvent.objects.filter(job=job).order_by("-id").first()
        assert "Maintenance window at 18:00" in said.message
    theirs.refresh_from_db()
    assert theirs.state == JobState.QUEUED and theirs.cancel_reason == ""


def test_a_member_cannot_bulk_cancel_and_sees_no_checkboxes(alice, bob, vision):
    job = JobFactory(team=vision, owner=alice, name="alices")
    client = _as(bob)
    assert 'form="bulk-cancel"' not in client.get("/jobs/?scope=team").content.decode()
    client.post("/jobs/cancel/", {"job": [str(job.public_id)], "reason": "mine now"})
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_bulk_cancel_needs_a_reason_and_cancels_nothing_without(alice, bob, vision):
    job = JobFactory(team=vision, owner=bob)
    page = _as(alice).post(
        "/jobs/cancel/", {"job": [str(job.public_id)], "reason": " "}, follow=True
    )
    assert "A reason is required" in page.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_the_owner_filter_offers_only_members_of_the_callers_teams(alice, vision, charlie):
    html = _as(alice).get("/jobs/?scope=team").content.decode()
    assert '<option value="alice"' in html and "charlie" not in html


def test_the_list_says_why_a_job_waits_in_the_job_pages_sentence(alice, vision):
    from portal.models import JobWait

    job = JobFactory(team=vision, owner=alice, name="waits")
    JobWait.objects.create(job=job, order_key=1, code="NO_CAPACITY", reason="needs 4 × t4; full")
    html = _as(alice).get("/jobs/").content.decode()
    assert (
        '<span title="Reason code NO_CAPACITY">No GPUs that fit it are free now: needs 4 × t4; '
        "full.</span>" in html
    )


def test_the_api_filters_by_owner_and_name_as_the_page_does(api_as, alice, bob, vision, charlie):
    from portal.models import Team

    JobFactory(team=vision, owner=bob, name="bert-small")
    JobFactory(team=vision, owner=alice, name="bert-alice")
    JobFactory(team=Team.objects.get(slug="language"), owner=charlie, name="bert-language")
    client = api_as(alice)
    names = lambda q: [j["name"] for j in client.get(f"/api/v1/jobs/?{q}").json()["results"]]  # noqa: E731
    assert names("owner=bob") == ["bert-small"]
    assert names("name_contains=BERT") == ["bert-alice", "bert-small"]  # never Language's
    assert names("owner=charlie") == []
    bad = client.get("/api/v1/jobs/?name_contains=" + "x" * 101)
    assert bad.status_code == 400 and "name_contains" in bad.json()["extra"]["fields"]
