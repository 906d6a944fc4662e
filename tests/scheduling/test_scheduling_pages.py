"""What users see of the scheduler: queue, quotas, placement, the match preview (pages + REST)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.models import JobState, JobWait
from scheduling.cycle import run_cycle
from scheduling.models import QuotaChange
from tests.conftest import job_body
from tests.factories import JobFactory

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
    # said in plain words, the code in each sentence's tooltip
    assert page.count('data-code="COHORT_HAS_NOTHING_TO_LEND"') == 2
    assert page.count("Other teams have too little idle quota to lend: needs") == 2
    assert "team uses 8 of 8 nominal" in page
    api = client.get("/api/v1/queue/").json()
    assert [e["name"] for e in api] == ["q1", "q2"]
    assert [e["position"] for e in api] == [1, 2]


def test_the_api_says_how_many_jobs_of_other_teams_are_ahead(
    client, bob, charlie, vision, language
):
    """Positions rank the whole queue: the caller's jobs at 2 and 4 have 1 and 2 of the other
    team's jobs ahead, which they cannot see; in the queue and on the job alike."""
    owners = [(charlie, language), (bob, vision), (charlie, language), (bob, vision)]
    jobs = []
    for position, (owner, team) in enumerate(owners, start=1):
        job = JobFactory(team=team, owner=owner, name=f"line-{position}")
        JobWait.objects.create(job=job, order_key=position, code="NO_CAPACITY", reason="full")
        jobs.append(job)
    unranked = JobFactory(team=vision, owner=bob, name="new")
    client.force_login(bob)
    entries = {e["name"]: e for e in client.get("/api/v1/queue/").json()}
    assert {n: e["others_ahead"] for n, e in entries.items()} == {
        "line-2": 1,
        "line-4": 2,
        "new": None,
    }
    detail = client.get(f"/api/v1/jobs/{jobs[3].public_id}/").json()
    assert (detail["position"], detail["others_ahead"]) == (4, 2)
    assert client.get(f"/api/v1/jobs/{unranked.public_id}/").json()["others_ahead"] is None


def test_a_long_queue_is_read_a_page_at_a_time(client, bob, vision):
    """105 queued jobs: 100 on the first page, the last 5 on the second, in line order; the
    model filter selects across the whole line (not within one page) and a new sort starts
    again at page 1."""
    base = timezone.now() - dt.timedelta(hours=2)
    for i in range(105):
        job = JobFactory(
            team=vision, owner=bob, name=f"line-{i:03d}",
            submitted_at=base + dt.timedelta(seconds=i),
            state_changed_at=base + dt.timedelta(seconds=i),
        )  # fmt: skip
        JobWait.objects.create(
            job=job, order_key=i + 1, model="t4" if i in (7, 103) else "a100-80gb"
        )
    client.force_login(bob)

    def names(page: str) -> list[str]:
        return re.findall(r">(line-\d{3})</a>", page)

    first = client.get("/queue/").content.decode()
    assert names(first) == [f"line-{i:03d}" for i in range(100)]
    assert "Jobs 1–100 of 105" in first
    second = client.get("/queue/?page=2").content.decode()
    assert names(second) == [f"line-{i:03d}" for i in range(100, 105)]
    assert 'rel="prev"' in second and 'rel="next"' not in second
    # Jobs 7 and 103 wait for T4: the filter finds both, the second beyond the first page.
    t4 = client.get("/queue/?model=t4").content.decode()
    assert names(t4) == ["line-007", "line-103"]
    assert '<option value="t4" selected>' in t4
    longest = client.get("/queue/?page=2&sort=waiting").content.decode()
    assert 'href="?sort=-waiting"' in longest  # the sort links drop the page
    assert names(longest)[:5] == [f"line-{i:03d}" for i in range(100, 105)]


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
    cell = {"was-n:vision:t4": "0", "was-b:vision:t4": ""}
    response = client.post("/quotas/", {**cell, "n:vision:t4": "4", "b:vision:t4": ""})
    assert response.status_code == 302
    bad = client.post("/quotas/", {**cell, "n:vision:t4": "-2", "b:vision:t4": ""})
    assert bad.status_code == 400 and "vision/t4 nominal" in bad.content.decode()
    assert QuotaChange.objects.filter(field="nominal").count() == 1
    client.force_login(alice)
    page = client.get("/quotas/").content.decode()
    assert "4 nominal" in page and 'name="n:vision:t4"' not in page
    assert client.post("/quotas/", {**cell, "n:vision:t4": "9"}).status_code == 403
    assert client.post("/quotas/check/", {**cell, "n:vision:t4": "9"}).status_code == 403


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


def test_the_match_preview_orders_models_by_policy(client, bob, catalog, pool):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    pool("east", "t4", nodes=1, gpus=1)
    client.force_login(bob)
    page = client.get(
        "/jobs/new/match/?requirement=constraints&min_gpu_memory_gib=12"
    ).content.decode()
    first = page.index("tried first")
    # T4 is the cheapest ≥ 12 GiB the pool has, A100 comes after it
    assert page.index('data-model="t4"') < first < page.index('data-model="a100-80gb"')
    fastest = client.get(
        "/api/v1/gpu-models/match/?selection_policy=fastest&requires_fp8=true"
    ).json()
    assert fastest["first_choice"] == "mi300x"
    none = client.get("/api/v1/gpu-models/match/?min_gpu_memory_gib=9999").json()
    assert none["matched"] == [] and none["first_choice"] is None
