"""What users see of the scheduler: queue, quotas, placement, the match preview (pages + REST)."""

from __future__ import annotations

import pytest

from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling.cycle import run_cycle
from scheduling.models import QuotaChange
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def test_the_queue_shows_reasons_positions_and_my_jobs(client, alice, bob, vision, pool, quota):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "a100-80gb", nominal=8)
    for i, user in enumerate([alice, bob, bob]):
        job_submit(user=user, data=job_body(name=f"q{i}", replicas=1, gpus_per_replica=8))
    run_cycle()
    client.force_login(bob)
    page = client.get("/queue/").content.decode()
    # Job names as link text (a bare "q0" can occur in the page's random CSRF token).
    assert ">q1</a>" in page and ">q2</a>" in page and ">q0</a>" not in page  # q0 admitted
    assert page.count('class="mine"') == 2
    # The team's 8 nominal A100s are in use and nobody in the cohort lends: the page says so.
    assert page.count("COHORT_HAS_NOTHING_TO_LEND") == 2
    assert "team uses 8 of 8 nominal" in page
    api = client.get("/api/v1/queue/").json()
    assert [e["name"] for e in api] == ["q1", "q2"]
    assert [e["position"] for e in api] == [1, 2]


def test_another_teams_queue_is_invisible(client, charlie, bob, vision, pool, quota):
    job_submit(user=bob, data=job_body(name="secret-run"))
    client.force_login(charlie)
    assert "secret-run" not in client.get("/queue/").content.decode()
    assert client.get("/api/v1/queue/").json() == []


def test_job_page_and_api_explain_the_placement(client, bob, vision, pool, quota):
    pool("east", "t4", nodes=1, gpus=4)
    pool("east", "a100-80gb", nodes=1, gpus=8)
    quota(vision, "t4", nominal=4)
    quota(vision, "a100-80gb", nominal=8)
    job = job_submit(
        user=bob, data=job_body(replicas=1, gpus_per_replica=1, min_gpu_memory_gib=12)
    ).job
    run_cycle()
    client.force_login(bob)
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "Why t4 on east" in page and "a100-80gb" in page
    data = client.get(f"/api/v1/jobs/{job.public_id}/").json()
    assert data["placement"]["model"] == "t4"
    assert data["state"] == JobState.ADMITTED


def test_staff_edit_quotas_inline_and_members_read_them(client, root, alice, vision, catalog):
    client.force_login(root)
    response = client.post(
        "/quotas/vision/t4/", {"nominal": "4", "borrowing_limit": ""}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200 and "saved" in response.content.decode()
    bad = client.post("/quotas/vision/t4/", {"nominal": "-2"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 400 and "nominal" in bad.content.decode()
    assert QuotaChange.objects.filter(field="nominal").count() == 1
    client.force_login(alice)
    page = client.get("/quotas/").content.decode()
    assert "4 nominal" in page and 'name="nominal"' not in page
    assert client.post("/quotas/vision/t4/", {"nominal": "9"}).status_code == 403


def test_quota_api_reads_for_members_and_writes_for_staff(
    api_as, root, bob, charlie, vision, catalog
):
    body = {"team": "vision", "gpu_model": "t4", "nominal": 4, "borrowing_limit": 2}
    assert api_as(bob).post("/api/v1/quotas/", body, format="json").status_code == 403
    assert api_as(root).post("/api/v1/quotas/", body, format="json").status_code == 200
    negative = api_as(root).post("/api/v1/quotas/", {**body, "nominal": -1}, format="json")
    assert negative.status_code == 400 and "nominal" in negative.json()["extra"]["fields"]
    assert api_as(bob).get("/api/v1/quotas/").json()[0]["nominal"] == 4
    assert api_as(charlie).get("/api/v1/quotas/").json() == []


def test_the_match_preview_orders_models_by_policy(client, bob, catalog):
    client.force_login(bob)
    page = client.get(
        "/jobs/new/match/?requirement=constraints&min_gpu_memory_gib=12"
    ).content.decode()
    first = page.index("tried first")
    assert page.rfind("<code>", 0, first) < page.index("t4") < first  # T4 is the cheapest ≥ 12 GiB
    fastest = client.get(
        "/api/v1/gpu-models/match/?selection_policy=fastest&requires_fp8=true"
    ).json()
    assert fastest["first_choice"] == "mi300x"
    none = client.get("/api/v1/gpu-models/match/?min_gpu_memory_gib=9999").json()
    assert none["matched"] == [] and none["first_choice"] is None
