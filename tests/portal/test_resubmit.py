"""Resubmit and clone: ``POST /api/v1/jobs/`` with ``from_job`` and overrides, and the form's
"Resubmit…", for jobs the caller may see only."""

from __future__ import annotations

import pytest

from portal.models import Job, JobEvent
from tests.conftest import job_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def original(api_as, bob, catalog):
    body = job_body(
        name="sweep-1",
        env={"EPOCHS": "3"},
        env_from_secrets={"HF_TOKEN": {"secret": "hf-credentials", "key": "token"}},
        args=["--lr", "0.1"],
        replicas=1,
        gpus_per_replica=2,
        requires_bf16=True,
        max_runtime_minutes=90,
        priority="low",
    )
    answer = api_as(bob).post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 201, answer.json()
    return Job.objects.get(public_id=answer.json()["id"])


def test_a_resubmit_without_changes_asks_for_the_same_job(api_as, bob, original):
    answer = api_as(bob).post("/api/v1/jobs/", {"from_job": str(original.public_id)})
    assert answer.status_code == 201, answer.json()
    again = answer.json()
    assert again["id"] != str(original.public_id)
    for field in (
        "team", "name", "image", "command", "args", "env", "env_from_secrets", "replicas",
        "gpus_per_replica",
        "cpu_per_replica", "memory_gib_per_replica", "min_gpu_memory_gib", "requires_bf16",
        "priority", "max_runtime_minutes", "max_retry", "selection_policy",
    ):  # fmt: skip
        assert (
            again[field] == api_as(bob).get(f"/api/v1/jobs/{original.public_id}/").json()[field]
        ), field
    note = JobEvent.objects.get(job__public_id=again["id"], reason="Resubmitted")
    assert str(original.public_id) in note.message


def test_overrides_win_and_defaults_follow_the_new_size(api_as, bob, original):
    answer = api_as(bob).post(
        "/api/v1/jobs/",
        {"from_job": str(original.public_id), "gpus_per_replica": 4, "name": "sweep-2"},
        format="json",
    )
    body = answer.json()
    assert answer.status_code == 201, body
    assert (body["name"], body["gpus_per_replica"]) == ("sweep-2", 4)
    # The original used the default 4 cores and 16 GiB per GPU: the clone gets them for 4 GPUs.
    assert (body["cpu_per_replica"], body["memory_gib_per_replica"]) == (16.0, 64.0)
    assert body["env"] == {"EPOCHS": "3"} and body["args"] == ["--lr", "0.1"]


def test_a_model_list_replaces_the_constraints_of_the_original(api_as, bob, original):
    answer = api_as(bob).post(
        "/api/v1/jobs/",
        {"from_job": str(original.public_id), "gpu_models": ["a100-80gb", "h100-sxm"]},
        format="json",
    )
    body = answer.json()
    assert answer.status_code == 201, body
    assert body["gpu_models"] == ["a100-80gb", "h100-sxm"]
    assert body["min_gpu_memory_gib"] is None and body["requires_bf16"] is False


def test_another_teams_job_cannot_be_cloned_and_nothing_is_stored(
    api_as, charlie, original, language
):
    before = Job.objects.count()
    answer = api_as(charlie).post(
        "/api/v1/jobs/", {"from_job": str(original.public_id), "team": "language"}
    )
    assert answer.status_code == 404
    assert "from_job" in answer.json()["extra"]["fields"]
    assert api_as(charlie).post("/api/v1/jobs/", {"from_job": "not-a-uuid"}).status_code == 404
    assert Job.objects.count() == before


def test_a_bad_override_names_its_field_and_stores_nothing(api_as, bob, original):
    before = Job.objects.count()
    answer = api_as(bob).post(
        "/api/v1/jobs/",
        {"from_job": str(original.public_id), "replicas": 0, "image": "no good"},
        format="json",
    )
    assert answer.status_code == 400
    assert {"replicas", "image"} <= set(answer.json()["extra"]["fields"])
    assert Job.objects.count() == before


def test_a_viewer_sees_the_job_but_cannot_resubmit_it(api_as, victor, original):
    answer = api_as(victor).post("/api/v1/jobs/", {"from_job": str(original.public_id)})
    assert answer.status_code == 403 and "team" in answer.json()["extra"]["fields"]


def test_the_form_opens_prefilled_and_submits_a_resubmit(client, bob, original):
    client.force_login(bob)
    page = client.get(f"/jobs/new/?from_job={original.public_id}").content.decode()
    assert 'value="sweep-1"' in page and 'id="prefilled"' in page
    assert 'name="gpus_per_replica" value="2"' in page
    assert "EPOCHS=3" in page and 'name="requires_bf16"' in page
    assert "HF_TOKEN=hf-credentials/token" in page
    assert f'name="from_job" value="{original.public_id}"' in page
    answer = client.post(
        "/jobs/new/",
        {
            "from_job": str(original.public_id),
            "team": "vision",
            "name": "sweep-1b",
            "kind": "training",
            "image": original.image,
            "command": "python train.py",
            "env": "EPOCHS=3",
            "replicas": 1,
            "gpus_per_replica": 2,
            "requirement": "constraints",
            "min_gpu_memory_gib": 40,
            "selection_policy": "cheapest",
            "allow_fallback": "on",
            "priority": "low",
            "max_runtime_minutes": 90,
            "max_retry": 3,
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    clone = Job.objects.get(name="sweep-1b")
    assert clone.events.filter(reason="Resubmitted").exists()


def test_the_form_will_not_prefill_another_teams_job(client, charlie, original):
    client.force_login(charlie)
    assert client.get(f"/jobs/new/?from_job={original.public_id}").status_code == 404
