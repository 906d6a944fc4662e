"""A job its team's quota can never admit is refused at submit, naming the limit and the ways
out (REST, batch and the web form, whose preview warns before submitting); one that fits the
quota, or borrowing within the cohort, is queued as before."""

from __future__ import annotations

import pytest

from portal.models import Job
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

A100 = {"gpu_models": ["a100-80gb"], "min_gpu_memory_gib": None}


def _fields(response) -> dict[str, list[str]]:
    return response.json()["extra"]["fields"]


def test_a_job_larger_than_nominal_plus_borrowing_limit_is_refused_and_nothing_stored(
    api_as, bob, vision, language, quota
):
    quota(vision, "a100-80gb", nominal=8, borrowing_limit=4)
    quota(language, "a100-80gb", nominal=8)  # idle: the cohort could lend all 8, Vision takes 4
    r = api_as(bob).post("/api/v1/jobs/", job_body(replicas=2, gpus_per_replica=8, **A100))
    assert r.status_code == 400, r.content
    message = _fields(r)["replicas"][0]
    assert "needs 16 GPUs at once (2 × 8 GPUs)" in message
    assert "a100-80gb 12 GPUs" in message  # nominal 8 + borrowing limit 4
    assert "at most 12 GPUs on a100-80gb" in message and "ask a team admin" in message
    assert not Job.objects.exists()


def test_a_job_within_the_quota_is_queued(api_as, bob, vision, quota):
    quota(vision, "a100-80gb", nominal=8, borrowing_limit=4)
    r = api_as(bob).post("/api/v1/jobs/", job_body(replicas=1, gpus_per_replica=8, **A100))
    assert r.status_code == 201, r.content


def test_what_the_cohort_could_lend_counts(api_as, bob, vision, language, quota):
    """Vision has 8 and no borrowing limit; Language, in the same (default) cohort, owns 8 it
    could lend: 16 may start some day, 24 never."""
    quota(vision, "a100-80gb", nominal=8)
    quota(language, "a100-80gb", nominal=8)
    ok = api_as(bob).post("/api/v1/jobs/", job_body(replicas=2, gpus_per_replica=8, **A100))
    assert ok.status_code == 201, ok.content
    never = api_as(bob).post("/api/v1/jobs/", job_body(replicas=3, gpus_per_replica=8, **A100))
    assert never.status_code == 400
    assert "a100-80gb 16 GPUs" in _fields(never)["replicas"][0]


def test_one_model_with_room_in_the_quota_is_enough(api_as, bob, vision, quota):
    quota(vision, "a100-80gb", nominal=4, borrowing_limit=0)
    quota(vision, "h100-sxm", nominal=16, borrowing_limit=0)
    body = job_body(
        replicas=2,
        gpus_per_replica=8,
        gpu_models=["a100-80gb", "h100-sxm"],
        min_gpu_memory_gib=None,
    )
    assert api_as(bob).post("/api/v1/jobs/", body).status_code == 201
    # Without fallback only the first choice is ever tried: its quota decides.
    body["allow_fallback"] = False
    r = api_as(bob).post("/api/v1/jobs/", body)
    assert r.status_code == 400 and "a100-80gb 4 GPUs" in _fields(r)["replicas"][0]


def test_a_team_without_any_quota_yet_is_not_refused(api_as, bob, catalog):
    """A pool being set up: its jobs wait with the engine's reason until quota is granted."""
    r = api_as(bob).post("/api/v1/jobs/", job_body(replicas=2, gpus_per_replica=8, **A100))
    assert r.status_code == 201, r.content


def test_a_batch_with_one_job_beyond_the_quota_is_refused_whole(api_as, bob, vision, quota):
    quota(vision, "a100-80gb", nominal=8, borrowing_limit=0)
    jobs = [
        job_body(name="small", replicas=1, gpus_per_replica=4, **A100),
        job_body(name="huge", replicas=2, gpus_per_replica=8, **A100),
    ]
    r = api_as(bob).post("/api/v1/jobs/batch/", {"jobs": jobs}, format="json")
    assert r.status_code == 400, r.content
    fields = _fields(r)
    assert list(fields) == ["jobs[1].replicas"]
    assert (
        "needs 16 GPUs at once (2 × 8 GPUs), more than team Vision's quota"
        in fields["jobs[1].replicas"][0]
    )
    assert not Job.objects.exists()


def test_the_form_warns_before_submitting_and_refuses_on_submit(client, bob, vision, quota):
    quota(vision, "a100-80gb", nominal=8, borrowing_limit=0)
    client.force_login(bob)
    preview = client.get(
        "/jobs/new/match/?team=vision&requirement=models&gpu_models=a100-80gb"
        "&replicas=3&gpus_per_replica=4&allow_fallback=on"
    )
    assert preview.status_code == 200
    assert 'id="quota-never"' in preview.content.decode()
    assert "needs 12 GPUs at once (3 × 4 GPUs)" in preview.content.decode()
    fits = client.get(
        "/jobs/new/match/?team=vision&requirement=models&gpu_models=a100-80gb"
        "&replicas=2&gpus_per_replica=4&allow_fallback=on"
    )
    assert 'id="quota-never"' not in fits.content.decode()
