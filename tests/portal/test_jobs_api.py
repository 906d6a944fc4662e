"""Reading and cancelling jobs over REST: lists, filters, pagination, events, conflicts."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.jobs.state import job_transition
from portal.models import JobState
from portal.tokens import api_token_create
from tests.conftest import job_body
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_list_is_newest_first_and_filterable(api_as, bob, vision):
    old = JobFactory(owner=bob, team=vision, name="old")
    new = JobFactory(owner=bob, team=vision, name="new", kind="inference")
    JobFactory(owner=bob, team=vision, state=JobState.FAILED, name="failed")
    client = api_as(bob)
    names = [j["name"] for j in client.get("/api/v1/jobs/").json()["results"]]
    assert names == ["failed", "new", "old"]
    queued = client.get("/api/v1/jobs/?state=QUEUED").json()["results"]
    assert [j["id"] for j in queued] == [str(new.public_id), str(old.public_id)]
    assert [j["name"] for j in client.get("/api/v1/jobs/?kind=inference").json()["results"]] == [
        "new"
    ]
    assert client.get("/api/v1/jobs/?state=BOGUS").status_code == 400


def test_status_filters_what_the_jobs_are_doing_now_restarting_included(api_as, bob, vision):
    """``status`` is what the job view shows: a RUNNING job whose gang waits to be placed
    again is RESTARTING, and then not RUNNING; the two filters never overlap."""
    from django.utils import timezone

    from clusters.models import Cluster, VolcanoJobRecord

    cluster = Cluster.objects.create(name="east", api_url="https://k.test")
    jobs = {}
    for name, phase in (("restarting", "Pending"), ("running", "Running"), ("fresh", None)):
        job = JobFactory(owner=bob, team=vision, state=JobState.RUNNING, cluster=cluster, name=name)
        if phase:
            VolcanoJobRecord.objects.create(
                job=job, cluster=cluster, namespace="gpupool", name=f"gp-{job.pk}",
                submission_uid="u", phase=phase, created_at=timezone.now(),
            )  # fmt: skip
        jobs[name] = job
    JobFactory(owner=bob, team=vision, name="queued")
    client = api_as(bob)

    def names(query: str) -> set[str]:
        response = client.get(f"/api/v1/jobs/?{query}")
        assert response.status_code == 200, response.content
        return {j["name"] for j in response.json()["results"]}

    assert names("status=RESTARTING") == {"restarting"}
    assert names("status=RUNNING") == {"running", "fresh"}
    assert names("status=RESTARTING&status=QUEUED") == {"restarting", "queued"}
    assert names("state=RUNNING") == {"restarting", "running", "fresh"}
    listed = client.get("/api/v1/jobs/?status=RESTARTING").json()["results"]
    assert [(j["state"], j["status"]) for j in listed] == [("RUNNING", "RESTARTING")]
    bad = client.get("/api/v1/jobs/?status=NAPPING")
    assert bad.status_code == 400 and "status" in bad.json()["extra"]["fields"]


@pytest.mark.parametrize("team", ["\x00", "vis ion", "vision;--"])
def test_a_team_filter_that_is_no_slug_is_a_400_naming_the_field(api_as, bob, vision, team):
    response = api_as(bob).get("/api/v1/jobs/", {"team": team})
    assert response.status_code == 400
    assert "team" in response.json()["extra"]["fields"]


def test_mine_narrows_to_my_own_jobs(api_as, alice, bob, vision):
    JobFactory(owner=alice, team=vision, name="alices")
    JobFactory(owner=bob, team=vision, name="bobs")
    names = [j["name"] for j in api_as(alice).get("/api/v1/jobs/?mine=true").json()["results"]]
    assert names == ["alices"]


def test_a_job_is_found_by_its_name_or_a_prefix_of_its_id_within_the_callers_teams(
    api_as, alice, bob, charlie, vision, language
):
    import uuid

    mine = JobFactory(
        owner=bob, team=vision, name="resnet", public_id=uuid.UUID(int=0xABCDEF01 << 96)
    )
    near = JobFactory(
        owner=alice, team=vision, name="resnet", public_id=uuid.UUID(int=0xABCDEF02 << 96)
    )
    hidden = JobFactory(owner=charlie, team=language, public_id=uuid.UUID(int=0xABCDEF01 << 96 | 1))
    client = api_as(bob)

    def ids(query: str) -> set[str]:
        response = client.get(f"/api/v1/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return {j["id"] for j in response.json()["results"]}

    assert ids("mine=true&name=resnet") == {str(mine.public_id)}
    assert ids("name=resnet") == {str(mine.public_id), str(near.public_id)}
    assert ids("id_prefix=ABCDEF01") == {str(mine.public_id)}  # not the other team's twin
    assert ids("id_prefix=abcdef") == {str(mine.public_id), str(near.public_id)}
    assert ids("id_prefix=abcdef01-0000") == {str(mine.public_id)}
    assert str(hidden.public_id) not in ids("id_prefix=abcdef01")
    for bad in ("abc", "abcdefg1", "a" * 33):
        response = client.get(f"/api/v1/jobs/?id_prefix={bad}")
        assert response.status_code == 400 and "id_prefix" in response.json()["extra"]["fields"]


def test_pages_follow_the_cursor_without_repeats(api_as, bob, vision):
    created = [JobFactory(owner=bob, team=vision, name=f"j{i}") for i in range(7)]
    client = api_as(bob)
    seen: list[str] = []
    url = "/api/v1/jobs/?page_size=3"
    while url:
        page = client.get(url).json()
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
    assert seen == [str(j.public_id) for j in reversed(created)]


def test_the_list_costs_the_same_queries_for_10_or_60_jobs(
    api_as, bob, vision, django_assert_max_num_queries
):
    client = api_as(bob)
    JobFactory.create_batch(10, owner=bob, team=vision)
    with django_assert_max_num_queries(4):
        assert len(client.get("/api/v1/jobs/").json()["results"]) == 10
    JobFactory.create_batch(50, owner=bob, team=vision)
    with django_assert_max_num_queries(4):
        assert len(client.get("/api/v1/jobs/").json()["results"]) == 50


def test_events_show_the_timeline(api_as, bob, catalog):
    client = api_as(bob)
    job_id = client.post("/api/v1/jobs/", job_body(), format="json").json()["id"]
    client.post(f"/api/v1/jobs/{job_id}/cancel/")
    events = client.get(f"/api/v1/jobs/{job_id}/events/").json()["results"]
    assert [(e["from_state"], e["to_state"]) for e in events] == [
        ("", "QUEUED"),
        ("QUEUED", "CANCELLED"),
    ]
    assert events[1]["actor"] == "bob"


def test_cancelling_a_finished_job_is_a_conflict(api_as, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.SUCCEEDED)
    response = api_as(bob).post(f"/api/v1/jobs/{job.public_id}/cancel/")
    assert response.status_code == 409
    assert "SUCCEEDED" in response.json()["message"]


def test_cancelling_a_running_job_asks_the_cluster_side(api_as, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.RUNNING)
    response = api_as(bob).post(f"/api/v1/jobs/{job.public_id}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "CANCELLING"
    again = api_as(bob).post(f"/api/v1/jobs/{job.public_id}/cancel/")
    assert (again.status_code, again.json()["state"]) == (202, "CANCELLING")


def test_gpu_models_lists_the_catalog(api_as, bob, catalog):
    models = {m["key"]: m for m in api_as(bob).get("/api/v1/gpu-models/").json()}
    assert models["a100-80gb"]["cost_factor"] == 1.0
    assert models["t4"]["cost_factor"] < models["a100-80gb"]["cost_factor"]
    assert models["a100-80gb-mig-1g.10gb"]["resource_name"] == "nvidia.com/mig-1g.10gb"
    assert "NVIDIA-A100-SXM4-80GB" in models["a100-80gb"]["product_labels"]


def test_a_token_authenticates_and_an_expired_or_revoked_one_does_not(bob, vision):
    from django.utils import timezone

    _token, raw = api_token_create(user=bob, name="script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/teams/").status_code == 200
    _token.expires_at = timezone.now()
    _token.save()
    assert client.get("/api/v1/teams/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Bearer gpp_nonsense_nonsense_nonsense")
    assert client.get("/api/v1/teams/").status_code == 401


def test_the_token_list_is_the_callers_own_and_marks_the_one_in_use(bob, charlie, api_as):
    first, _ = api_token_create(user=bob, name="laptop")
    _second, raw = api_token_create(user=bob, name="ci")
    api_token_create(user=charlie, name="not yours")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    listed = client.get("/api/v1/tokens/").json()
    assert [(t["name"], t["current"]) for t in listed] == [("ci", True), ("laptop", False)]
    assert listed[1]["prefix"] == first.prefix and "digest" not in listed[1]
    by_session = api_as(bob).get("/api/v1/tokens/").json()  # a browser: no token in use
    assert [t["current"] for t in by_session] == [False, False]
    assert APIClient().get("/api/v1/tokens/").status_code == 401


def test_only_a_digest_of_the_token_is_stored(bob):
    token, raw = api_token_create(user=bob, name="x")
    token.refresh_from_db()
    assert raw not in (token.digest, token.prefix)
    assert raw.startswith(token.prefix)


def test_session_auth_enforces_csrf(bob, catalog):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(bob)
    response = client.post("/api/v1/jobs/", job_body(), format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["message"]


def test_a_job_whose_state_moved_under_the_cancel_is_retried(api_as, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.QUEUED)
    job_transition(job_id=job.pk, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Test")
    # the caller still holds the stale QUEUED copy
    response = api_as(bob).post(f"/api/v1/jobs/{job.public_id}/cancel/")
    assert response.json()["state"] == "CANCELLING"


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/queue/", "/jobs/", "/queue/"])
def test_a_nul_in_any_query_parameter_is_a_400_not_a_database_error(client, bob, path):
    client.force_login(bob)
    response = client.get(path, {"team": "\x00", "model": "a\x00"})
    assert response.status_code == 400
    if path.startswith("/api/"):
        assert set(response.json()["extra"]["fields"]) == {"model", "team"}


def test_a_malformed_failure_rate_fails_at_start_up():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DEBUG"],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "GPUPOOL_API_AUTH_FAILURE_RATE": "lots"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "GPUPOOL_API_AUTH_FAILURE_RATE" in result.stderr
