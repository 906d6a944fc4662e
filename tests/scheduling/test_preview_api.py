"""``POST /api/v1/quotas/preview/``: staff only, fields named on bad input, the engine's answer."""

from __future__ import annotations

import pytest

from portal.jobs.services import job_submit
from portal.models import JobState
from scheduling.models import Quota, QuotaChange
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/quotas/preview/"
A100 = "a100-80gb"


@pytest.fixture
def waiting(bob, vision, pool, quota):
    """Vision's 8-GPU job waits for quota on a pool that has room."""
    pool("east", A100, nodes=1, gpus=8)
    quota(vision, A100, nominal=0, borrowing_limit=0)
    body = job_body(replicas=1, gpus_per_replica=8, gpu_models=[A100])
    body.pop("min_gpu_memory_gib")
    return job_submit(user=bob, data=body).job


def test_an_admin_sees_the_job_a_quota_raise_would_start(api_as, root, waiting):
    response = api_as(root).post(
        URL, {"quotas": [{"team": "vision", "gpu_model": A100, "nominal": 8}]}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["would_start"] == [
        {
            "job": str(waiting.public_id),
            "name": waiting.name,
            "team": "vision",
            "gpu_model": A100,
            "cluster": "east",
            "gpus": 8,
            "new": True,
        }
    ]
    assert body["starts_now"] == 0 and body["would_preempt"] == []
    a100 = next(g for g in body["guarantees"] if g["gpu_model"] == A100)
    assert (a100["nominal_now"], a100["nominal"], a100["capacity"], a100["over"]) == (0, 8, 8, 0)
    # nothing saved, nothing decided
    assert Quota.objects.get(team__slug="vision").nominal == 0
    assert not QuotaChange.objects.exists()
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED and waiting.pending_reason_code == ""


def test_an_overcommitting_proposal_says_by_how_much(api_as, root, waiting):
    body = (
        api_as(root)
        .post(
            URL,
            {
                "quotas": [{"team": "vision", "gpu_model": A100, "nominal": 12}],
                "clusters": [{"cluster": "east", "state": "draining"}],
            },
            format="json",
        )
        .json()
    )
    a100 = next(g for g in body["guarantees"] if g["gpu_model"] == A100)
    assert (a100["capacity_now"], a100["capacity"], a100["over"]) == (8, 0, 12)
    assert [(b["code"], b["was"]) for b in body["newly_blocked"]] == [
        ("CLUSTER_DRAINING", "QUOTA_EXHAUSTED")
    ]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"quotas": [{"team": "nobody", "gpu_model": A100}]}, "quotas.0.team"),
        ({"quotas": [{"team": "vision", "gpu_model": "nope"}]}, "quotas.0.gpu_model"),
        ({"quotas": [{"team": "vision", "gpu_model": A100, "nominal": -1}]}, "quotas.0.nominal"),
        ({"teams": [{"team": "vision", "weight": 0}]}, "teams.0.weight"),
        ({"teams": [{"team": "vision", "cohort": "ghosts"}]}, "teams.0.cohort"),
        ({"cohort_quotas": [{"cohort": "default", "gpu_model": A100}]}, "cohort_quotas.0.nominal"),
        ({"clusters": [{"cluster": "east", "state": "melted"}]}, "clusters.0.state"),
        ({"clusters": [{"cluster": "west", "state": "draining"}]}, "clusters"),
        ({"quotas": "all of them"}, "quotas.non_field_errors"),
    ],
    ids=[
        "unknown team",
        "unknown model",
        "negative nominal",
        "zero weight",
        "unknown cohort",
        "cohort quota without nominal",
        "unknown state",
        "unknown cluster",
        "not a list",
    ],
)
def test_bad_input_is_a_400_naming_the_field(api_as, root, waiting, payload, field):
    response = api_as(root).post(URL, payload, format="json")
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert field in fields, fields


def test_only_platform_admins_may_preview(api_as, alice, waiting):
    payload = {"quotas": [{"team": "vision", "gpu_model": A100, "nominal": 8}]}
    assert api_as(alice).post(URL, payload, format="json").status_code == 403  # a team admin
    from rest_framework.test import APIClient

    assert APIClient().post(URL, payload, format="json").status_code in (401, 403)


def test_the_schema_documents_the_preview(api_as, root):
    schema = api_as(root).get("/api/schema/?format=json").json()
    operation = schema["paths"][URL]["post"]
    assert "200" in operation["responses"] and "400" in operation["responses"]
    assert "ProposalRequest" in schema["components"]["schemas"]
