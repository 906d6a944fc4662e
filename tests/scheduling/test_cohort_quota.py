"""Capacity owned by a cohort or the pool (CohortQuota), and lowering a quota below its use:
edited by platform admins (REST, page, admin), audited, shown, and fed into the cycle."""

from __future__ import annotations

import pytest

from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling.cycle import run_cycle
from scheduling.models import Cohort, CohortQuota, GpuModel, QuotaChange, TeamPolicy
from tests.builders import running_row
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


def test_cohort_quota_api_is_edited_by_staff_and_read_by_everyone(api_as, root, bob, catalog):
    body = {"cohort": "default", "gpu_model": "a100-80gb", "nominal": 8}
    assert api_as(bob).post("/api/v1/cohort-quotas/", body, format="json").status_code == 403
    saved = api_as(root).post("/api/v1/cohort-quotas/", body, format="json")
    assert saved.status_code == 200, saved.json()
    assert saved.json()["cohort"] == "default" and saved.json()["nominal"] == 8
    assert Cohort.objects.filter(slug="default").exists()  # the pool's cohort, made on demand
    changed = api_as(root).post("/api/v1/cohort-quotas/", {**body, "nominal": 12}, format="json")
    assert changed.status_code == 200 and CohortQuota.objects.get().nominal == 12
    audit = QuotaChange.objects.filter(cohort__slug="default").order_by("id")
    assert [(c.old_value, c.new_value, c.changed_by) for c in audit] == [
        ("", "8", root),
        ("8", "12", root),
    ]
    assert api_as(bob).get("/api/v1/cohort-quotas/").json() == [
        {**body, "nominal": 12, "updated_at": changed.json()["updated_at"]}
    ]
    one = api_as(bob).get("/api/v1/cohort-quotas/default/a100-80gb/")
    assert one.status_code == 200 and one.json()["nominal"] == 12


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nominal": -1}, "nominal"),
        ({"nominal": "lots"}, "nominal"),
        ({"cohort": "nobody"}, "cohort"),
        ({"gpu_model": "z9000"}, "gpu_model"),
    ],
)
def test_cohort_quota_api_errors_name_the_field(api_as, root, catalog, change, field):
    body = {"cohort": "default", "gpu_model": "a100-80gb", "nominal": 8, **change}
    response = api_as(root).post("/api/v1/cohort-quotas/", body, format="json")
    assert response.status_code == 400
    assert response.json()["message"] and field in response.json()["extra"]["fields"]
    assert not CohortQuota.objects.exists()


def test_a_team_without_quota_runs_on_capacity_its_cohort_owns(bob, vision, pool):
    """Nobody has nominal quota; the pool owns 8 A100: vision's job is admitted, borrowed."""
    pool("east", "a100-80gb", nodes=1, gpus=8)
    job = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=4)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # nothing anyone may use yet
    CohortQuota.objects.create(
        cohort=Cohort.objects.create(name="Pool", slug="default"),
        gpu_model=GpuModel.objects.get(key="a100-80gb"),
        nominal=8,
    )
    assert run_cycle().admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement["borrowed_gpus"] == 4


def test_a_cohorts_quota_is_for_its_members_only(bob, vision, pool):
    pool("east", "a100-80gb", nodes=1, gpus=8)
    lab = Cohort.objects.create(name="Lab", slug="lab")
    CohortQuota.objects.create(
        cohort=lab, gpu_model=GpuModel.objects.get(key="a100-80gb"), nominal=8
    )
    job = job_submit(user=bob, data=job_body(replicas=1, gpus_per_replica=4)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    TeamPolicy.objects.create(team=vision, cohort=lab)
    assert run_cycle().admitted == [job.pk]


def test_cohort_quota_is_shown_on_the_quota_and_fair_share_pages(client, root, bob, catalog):
    client.force_login(root)
    response = client.post(
        "/quotas/cohort/", {"cohort": "default", "gpu_model": "t4", "nominal": "6"}, follow=True
    )
    assert response.status_code == 200
    assert CohortQuota.objects.get(cohort__slug="default").nominal == 6
    bad = client.post("/quotas/cohort/", {"cohort": "default", "gpu_model": "t4", "nominal": "-1"})
    assert bad.status_code == 302 and CohortQuota.objects.get().nominal == 6
    page = client.get("/quotas/").content.decode()
    assert "Cohort-owned quota" in page and "cohort default" in page  # the audit trail
    client.force_login(bob)
    assert client.post("/quotas/cohort/", {"cohort": "default"}).status_code == 403
    for url in ("/quotas/", "/fair-share/"):
        page = client.get(url).content.decode()
        assert "Cohort-owned quota" in page
        assert "<td>t4</td><td>6</td>" in page


def test_the_quota_editor_warns_before_lowering_a_nominal_below_use(
    client, root, vision, catalog, quota
):
    quota(vision, "a100-80gb", nominal=8)
    running_row(team=vision, gpus=6)
    client.force_login(root)
    cell = {"was-n:vision:a100-80gb": "8", "was-b:vision:a100-80gb": "", "b:vision:a100-80gb": ""}
    warned = client.post("/quotas/", {**cell, "n:vision:a100-80gb": "2"})
    text = warned.content.decode()
    assert warned.status_code == 200
    assert "uses 6 a100-80gb GPUs now, 4 more than the new nominal of 2" in text
    assert "preempt" in text and "Save all changes anyway" in text and 'name="confirm"' in text
    assert 'value="2"' in text  # what the admin typed is kept
    assert vision.quotas.get().nominal == 8 and not QuotaChange.objects.exists()
    saved = client.post("/quotas/", {**cell, "n:vision:a100-80gb": "2", "confirm": "1"})
    assert saved.status_code == 302 and vision.quotas.get().nominal == 2
    # Above the use, or raising: no question asked.
    cell["was-n:vision:a100-80gb"] = "2"
    raised = client.post("/quotas/", {**cell, "n:vision:a100-80gb": "7"})
    assert raised.status_code == 302 and vision.quotas.get().nominal == 7


def test_the_quota_api_says_what_lowering_below_use_means(api_as, root, vision, catalog, quota):
    quota(vision, "a100-80gb", nominal=8)
    running_row(team=vision, gpus=6)
    body = {"team": "vision", "gpu_model": "a100-80gb", "nominal": 4}
    lowered = api_as(root).post("/api/v1/quotas/", body, format="json").json()
    assert lowered["nominal"] == 4 and lowered["gpus_in_use"] == 6
    assert "2 more than the new nominal of 4" in lowered["warning"]
    fine = api_as(root).post("/api/v1/quotas/", {**body, "nominal": 6}, format="json").json()
    assert fine["warning"] == ""
