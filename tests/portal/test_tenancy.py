"""Team isolation as a matrix: every job endpoint × every role.

Alice (admin of Vision), Bob (member of Vision), Victor (viewer of Vision), Charlie (admin of
Language) and Root (platform admin). The job under test belongs to Bob in Vision.
"""

from __future__ import annotations

import pytest

from portal.models import JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

# persona → (can see, can cancel)
ACCESS = {
    "alice": (True, True),  # team admin: any job of the team
    "bob": (True, True),  # owner
    "victor": (True, False),  # viewer: read only → 403 on cancel
    "charlie": (False, False),  # other team → 404 everywhere
    "root": (True, True),  # platform admin
}


@pytest.fixture
def people(alice, bob, victor, charlie, root):
    return {"alice": alice, "bob": bob, "victor": victor, "charlie": charlie, "root": root}


@pytest.fixture
def bobs_job(bob, vision):
    return JobFactory(owner=bob, team=vision)


@pytest.mark.parametrize("persona", ACCESS)
@pytest.mark.parametrize("endpoint", ["detail", "events"])
def test_reading_a_job(api_as, people, bobs_job, persona, endpoint):
    url = f"/api/v1/jobs/{bobs_job.public_id}/" + ("events/" if endpoint == "events" else "")
    response = api_as(people[persona]).get(url)
    assert response.status_code == (200 if ACCESS[persona][0] else 404)


@pytest.mark.parametrize("persona", ACCESS)
def test_cancelling_a_job(api_as, people, bobs_job, persona):
    response = api_as(people[persona]).post(f"/api/v1/jobs/{bobs_job.public_id}/cancel/")
    can_see, can_cancel = ACCESS[persona]
    expected = 202 if can_cancel else (403 if can_see else 404)
    assert response.status_code == expected
    bobs_job.refresh_from_db()
    assert bobs_job.state == (JobState.CANCELLED if can_cancel else JobState.QUEUED)


@pytest.mark.parametrize("persona", ACCESS)
def test_listing_jobs(api_as, people, bobs_job, language, charlie, persona):
    charlies_job = JobFactory(owner=charlie, team=language)
    ids = {j["id"] for j in api_as(people[persona]).get("/api/v1/jobs/").json()["results"]}
    assert (str(bobs_job.public_id) in ids) == ACCESS[persona][0]
    assert (str(charlies_job.public_id) in ids) == (persona in {"charlie", "root"})


@pytest.mark.parametrize("persona", ACCESS)
def test_pages_follow_the_same_rules(client, people, bobs_job, persona):
    client.force_login(people[persona])
    detail = client.get(f"/jobs/{bobs_job.public_id}/")
    assert detail.status_code == (200 if ACCESS[persona][0] else 404)
    cancel = client.post(f"/jobs/{bobs_job.public_id}/cancel/")
    bobs_job.refresh_from_db()
    if ACCESS[persona][1]:
        assert bobs_job.state == JobState.CANCELLED
    else:
        assert cancel.status_code in (302, 404)
        assert bobs_job.state == JobState.QUEUED


def test_a_team_filter_cannot_widen_the_scope(api_as, charlie, bobs_job):
    response = api_as(charlie).get("/api/v1/jobs/?team=vision")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_a_team_page_filter_cannot_widen_the_scope(client, charlie, bobs_job):
    client.force_login(charlie)
    page = client.get("/jobs/?scope=team&team=vision")
    assert bobs_job.name not in page.content.decode()


def test_a_malformed_job_id_is_a_404(api_as, bob):
    assert api_as(bob).get("/api/v1/jobs/not-a-uuid/").status_code == 404


def test_a_member_cannot_cancel_a_teammates_job(api_as, alice, bob, vision):
    alices_job = JobFactory(owner=alice, team=vision)
    response = api_as(bob).post(f"/api/v1/jobs/{alices_job.public_id}/cancel/")
    assert response.status_code == 403


def test_teams_lists_only_my_teams_with_my_role(api_as, bob, language):
    teams = api_as(bob).get("/api/v1/teams/").json()
    assert teams == [{"slug": "vision", "name": "Vision", "description": "", "role": "member"}]
