"""Job templates over REST and in the pages: built-ins for everyone, a team's managed by its
team admins, personal ones by their owner; every template's spec is a valid job request."""

from __future__ import annotations

import pytest

from portal.jobs.job_templates import builtin_templates_read, builtin_templates_sync
from portal.models import Job, JobTemplate
from tests.conftest import job_body

pytestmark = pytest.mark.django_db

SPEC = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "eval.py"]}


def _create(client, **body):
    return client.post("/api/v1/templates/", body, format="json")


def test_the_built_ins_ship_with_the_portal_and_each_submits(api_as, bob, catalog):
    listed = api_as(bob).get("/api/v1/templates/?scope=builtin").json()
    keys = {t["key"]: t for t in listed}
    assert set(keys) == {"gpu-smoke-test", "pytorch-ddp", "vllm-server"}
    assert keys["gpu-smoke-test"]["spec"]["command"] == ["nvidia-smi", "-L"]
    assert keys["vllm-server"]["spec"]["kind"] == "inference"
    assert not any(t["can_edit"] for t in listed)
    for template in listed:
        answer = api_as(bob).post(
            "/api/v1/jobs/", {**template["spec"], "team": "vision"}, format="json"
        )
        assert answer.status_code == 201, (template["key"], answer.json())


def test_the_built_ins_follow_the_data_file(tmp_path):
    rows = builtin_templates_read()
    data = tmp_path / "templates.json"
    data.write_text(__import__("json").dumps(rows[:1]))
    JobTemplate.objects.filter(key=rows[0]["key"]).update(name="edited by hand")
    assert builtin_templates_sync(data) == 1
    assert list(JobTemplate.objects.filter(scope="builtin").values_list("key", "name")) == [
        (rows[0]["key"], rows[0]["name"])
    ]


def test_a_member_keeps_personal_templates_nobody_else_sees(api_as, bob, alice, charlie, catalog):
    made = _create(api_as(bob), name="my eval", scope="personal", team="vision", spec=SPEC)
    assert made.status_code == 201, made.json()
    body = made.json()
    assert (body["owner"], body["team"], body["can_edit"]) == ("bob", "vision", True)
    url = f"/api/v1/templates/{body['id']}/"
    for other in (alice, charlie):  # not even the team admin
        assert api_as(other).get(url).status_code == 404
        assert api_as(other).delete(url).status_code == 404
    changed = api_as(bob).patch(url, {"description": "the nightly eval"}, format="json")
    assert changed.status_code == 200 and changed.json()["description"] == "the nightly eval"
    assert api_as(bob).delete(url).status_code == 204
    assert not JobTemplate.objects.filter(pk=body["id"]).exists()


def test_team_templates_are_managed_by_team_admins_and_used_by_members(
    api_as, bob, alice, victor, charlie, catalog
):
    refused = _create(api_as(bob), name="team eval", scope="team", team="vision", spec=SPEC)
    assert refused.status_code == 403 and "scope" in refused.json()["extra"]["fields"]
    made = _create(api_as(alice), name="team eval", scope="team", team="vision", spec=SPEC)
    assert made.status_code == 201, made.json()
    url = f"/api/v1/templates/{made.json()['id']}/"
    seen = api_as(bob).get(url).json()
    assert seen["scope"] == "team" and seen["can_edit"] is False
    assert api_as(victor).get(url).status_code == 200  # a viewer reads the team's templates
    assert api_as(charlie).get(url).status_code == 404  # another team does not
    assert api_as(bob).patch(url, {"name": "mine now"}, format="json").status_code == 403
    assert api_as(bob).delete(url).status_code == 403
    renamed = api_as(alice).patch(url, {"name": "team eval v2"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "team eval v2"
    moved = api_as(alice).patch(url, {"team": "language"}, format="json")
    assert moved.status_code == 400 and "team" in moved.json()["extra"]["fields"]
    assert api_as(alice).delete(url).status_code == 204


def test_a_template_from_a_job_keeps_its_request_without_the_team(api_as, bob, catalog):
    job = (
        api_as(bob)
        .post("/api/v1/jobs/", job_body(name="resnet", env={"EPOCHS": "9"}), format="json")
        .json()
    )
    made = _create(api_as(bob), name="resnet", scope="personal", team="vision", from_job=job["id"])
    assert made.status_code == 201, made.json()
    spec = made.json()["spec"]
    assert "team" not in spec
    assert (spec["name"], spec["env"], spec["replicas"]) == ("resnet", {"EPOCHS": "9"}, 2)


def test_bad_templates_name_the_field_and_are_not_stored(api_as, bob, victor, charlie, catalog):
    client = api_as(bob)
    bad_spec = _create(client, name="x", scope="personal", team="vision", spec={"image": "no good"})
    assert bad_spec.status_code == 400 and "spec.image" in bad_spec.json()["extra"]["fields"]
    team_in_spec = {**SPEC, "team": "a"}
    with_team = _create(client, name="x", scope="personal", team="vision", spec=team_in_spec)
    assert "spec.team" in with_team.json()["extra"]["fields"]
    not_mine = _create(client, name="x", scope="personal", team="language", spec=SPEC)
    assert not_mine.status_code == 404 and "team" in not_mine.json()["extra"]["fields"]
    viewer = _create(api_as(victor), name="x", scope="personal", team="vision", spec=SPEC)
    assert viewer.status_code == 403
    builtin = _create(client, name="x", scope="builtin", team=None, spec=SPEC)
    assert builtin.status_code == 400 and "scope" in builtin.json()["extra"]["fields"]
    first = _create(client, name="dup", scope="personal", team="vision", spec=SPEC)
    assert first.status_code == 201
    dup = _create(client, name="dup", scope="personal", team="vision", spec=SPEC)
    assert dup.status_code == 409 and "name" in dup.json()["extra"]["fields"]
    assert JobTemplate.objects.exclude(scope="builtin").count() == 1


def test_a_built_in_cannot_be_changed(api_as, root, catalog):
    smoke = JobTemplate.objects.get(key="gpu-smoke-test")
    answer = api_as(root).patch(f"/api/v1/templates/{smoke.pk}/", {"name": "x"}, format="json")
    assert answer.status_code == 403
    assert api_as(root).delete(f"/api/v1/templates/{smoke.pk}/").status_code == 403


def test_the_schema_documents_templates(client):
    schema = client.get("/api/schema/?format=json").json()
    assert "/api/v1/templates/" in schema["paths"]
    assert "/api/v1/templates/{id}/" in schema["paths"]
    assert set(schema["paths"]["/api/v1/templates/{id}/"]) >= {"get", "put", "patch", "delete"}


# --- the pages -------------------------------------------------------------------------------
def test_the_submit_form_starts_from_a_template(client, bob, catalog):
    client.force_login(bob)
    smoke = JobTemplate.objects.get(key="gpu-smoke-test")
    page = client.get(f"/jobs/new/?template={smoke.pk}").content.decode()
    assert "nvidia-smi -L</textarea>" in page and "Pre-filled from the template" in page
    assert f'<option value="{smoke.pk}" selected>' in page


def test_a_template_is_made_from_a_job_page_and_edited(client, bob, catalog):
    client.force_login(bob)
    job = client.post("/api/v1/jobs/", job_body(name="nightly"), content_type="application/json")
    job_id = job.json()["id"]
    detail = client.get(f"/jobs/{job_id}/").content.decode()
    assert f"/templates/new/?from_job={job_id}" in detail
    form = client.get(f"/templates/new/?from_job={job_id}").content.decode()
    assert 'value="nightly"' in form
    saved = client.post(
        "/templates/new/",
        {
            "from_job": job_id,
            "template_name": "nightly run",
            "scope": "personal",
            "template_team": "vision",
            "name": "",
            "kind": "training",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": "python train.py",
            "replicas": 2,
            "gpus_per_replica": 4,
            "requirement": "constraints",
            "min_gpu_memory_gib": 40,
            "selection_policy": "cheapest",
            "allow_fallback": "on",
            "priority": "normal",
            "max_runtime_minutes": 60,
            "max_retry": 3,
        },
    )
    assert saved.status_code == 302, saved.content.decode()[:3000]
    template = JobTemplate.objects.get(name="nightly run")
    assert template.spec["gpus_per_replica"] == 4 and "name" not in template.spec
    listing = client.get("/templates/").content.decode()
    assert "nightly run" in listing and f"/templates/{template.pk}/" in listing
    assert Job.objects.count() == 1


def test_a_member_cannot_open_the_editor_of_a_team_template(client, bob, alice, catalog):
    template = JobTemplate.objects.create(
        name="team thing", scope="team", team=alice.memberships.first().team, spec=SPEC
    )
    client.force_login(bob)
    assert client.get(f"/templates/{template.pk}/").status_code == 404
    assert client.post(f"/templates/{template.pk}/delete/").status_code == 404
    client.force_login(alice)
    assert client.get(f"/templates/{template.pk}/").status_code == 200
    assert client.post(f"/templates/{template.pk}/delete/").status_code == 302
