"""Which priorities a team may submit is its policy, set by platform admins.

Without a policy a team submits up to ``normal``; a job above what its team allows is a 403
naming ``priority`` (``jobs[i].priority`` in a batch), on every way in, and nothing is stored.
A policy lowered after the fact does not let old jobs keep the higher rank: the scheduling
cycle counts a job's priority as at most what its team may use now.
"""

from __future__ import annotations

import re

import pytest

from portal.models import Job, Priority
from scheduling.models import QuotaChange, TeamPolicy
from tests.conftest import job_body
from tests.portal.test_pages import FORM

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def _allow(team, top: Priority) -> None:
    TeamPolicy.objects.update_or_create(team=team, defaults={"max_priority": top})


def test_high_priority_is_refused_without_a_policy_that_allows_it(api_as, bob, vision, catalog):
    response = api_as(bob).post(URL, job_body(priority="high"), format="json")
    assert response.status_code == 403
    body = response.json()
    assert body["extra"]["fields"] == {"priority": ["Vision may submit up to priority normal."]}
    assert "needs a platform admin to allow it" in body["message"]
    assert not Job.objects.exists()
    for allowed in ("low", "normal"):
        assert api_as(bob).post(URL, job_body(priority=allowed), format="json").status_code == 201


def test_a_team_whose_policy_allows_high_submits_it(api_as, bob, vision, catalog):
    _allow(vision, Priority.HIGH)
    response = api_as(bob).post(URL, job_body(priority="high"), format="json")
    assert response.status_code == 201
    assert Job.objects.get().priority == Priority.HIGH


def test_a_policy_may_also_keep_a_team_at_low(api_as, bob, vision, catalog):
    _allow(vision, Priority.LOW)
    response = api_as(bob).post(URL, job_body(), format="json")  # normal is the default
    assert response.status_code == 403
    assert response.json()["extra"]["fields"]["priority"] == [
        "Vision may submit up to priority low."
    ]


def test_a_batch_with_one_job_above_the_policy_is_refused_whole(
    api_as, bob, charlie, vision, language, catalog
):
    from tests.factories import MembershipFactory

    MembershipFactory(user=bob, team=language)
    _allow(language, Priority.HIGH)
    jobs = [
        job_body(name="a"),
        job_body(name="b", team="language", priority="high"),  # allowed there
        job_body(name="c", priority="high"),
        job_body(name="d", priority="high"),
    ]
    response = api_as(bob).post(URL + "batch/", {"jobs": jobs}, format="json")
    assert response.status_code == 403
    assert response.json()["extra"]["fields"] == {
        "jobs[2].priority": ["Vision may submit up to priority normal."],
        "jobs[3].priority": ["Vision may submit up to priority normal."],
    }
    assert not Job.objects.exists()


def test_the_web_form_refuses_it_with_a_403_next_to_the_field(client, bob, vision, catalog):
    client.force_login(bob)
    page = client.get("/jobs/new/").content.decode()
    assert "Your teams&#x27; policies allow: Vision up to normal." in page
    response = client.post("/jobs/new/", {**FORM, "priority": "high"})
    assert response.status_code == 403
    html = response.content.decode()
    assert re.search(r'has-error"[^>]*>\s*<label for="id_priority"', html)
    assert "Vision may submit up to priority normal." in html
    assert not Job.objects.exists()


def test_a_retry_of_a_job_created_before_the_policy_was_lowered_is_still_answered(
    api_as, bob, vision, catalog
):
    _allow(vision, Priority.HIGH)
    client = api_as(bob)
    first = client.post(URL, job_body(priority="high"), format="json", HTTP_IDEMPOTENCY_KEY="k")
    _allow(vision, Priority.NORMAL)
    again = client.post(URL, job_body(priority="high"), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (first.status_code, again.status_code) == (201, 200)
    fresh = client.post(URL, job_body(priority="high"), format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert fresh.status_code == 403


def test_platform_admins_set_it_over_rest_audited(api_as, root, alice, bob, vision, catalog):
    response = api_as(root).post(
        "/api/v1/team-policies/", {"team": "vision", "max_priority": "high"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["max_priority"] == "high"
    assert TeamPolicy.objects.get(team=vision).max_priority == Priority.HIGH
    change = QuotaChange.objects.get(field="max_priority")
    assert (change.old_value, change.new_value, change.changed_by) == ("normal", "high", root)
    assert api_as(bob).post(URL, job_body(priority="high"), format="json").status_code == 201


def test_team_admins_read_their_policy_but_cannot_change_it(api_as, alice, vision, language):
    listed = api_as(alice).get("/api/v1/team-policies/")
    assert listed.status_code == 200
    assert [(p["team"], p["max_priority"]) for p in listed.json()] == [("vision", "normal")]
    assert api_as(alice).get("/api/v1/team-policies/language/").status_code == 404
    refused = api_as(alice).post(
        "/api/v1/team-policies/", {"team": "vision", "max_priority": "high"}, format="json"
    )
    assert refused.status_code == 403
    assert not TeamPolicy.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"team": "vision", "max_priority": "urgent"}, "max_priority"),
        ({"team": "vision", "max_priority": 100}, "max_priority"),
        ({"team": "nope", "max_priority": "high"}, "team"),
        ({"team": "vision", "weight": 0}, "weight"),
        ({"team": "vision", "max_queued_jobs": -1}, "max_queued_jobs"),
    ],
    ids=["unknown name", "a number", "unknown team", "zero weight", "negative limit"],
)
def test_a_bad_policy_is_refused_naming_the_field(api_as, root, vision, body, field):
    response = api_as(root).post("/api/v1/team-policies/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert not TeamPolicy.objects.exists()


def test_the_admin_saves_it_through_the_audited_service(client, root, vision):
    client.force_login(root)
    response = client.post(
        "/admin/scheduling/teampolicy/add/",
        {"team": vision.pk, "weight": "1", "max_priority": str(Priority.HIGH.value)},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TeamPolicy.objects.get(team=vision).max_priority == Priority.HIGH
    assert QuotaChange.objects.filter(field="max_priority", new_value="high").exists()
