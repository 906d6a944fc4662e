"""The submit form helps: human labels, real defaults and bounds, one pass of every error
under a summary that links to each field, the team last submitted to, and a clear word for a
platform admin who is in no team."""

from __future__ import annotations

import re

import pytest

from portal.jobs.services import job_submit
from portal.models import Job, Membership, Role
from tests.conftest import job_body
from tests.factories import TeamFactory
from tests.portal.test_pages import FORM

pytestmark = pytest.mark.django_db


def _input(page: str, name: str) -> str:
    found = re.search(rf'<(?:input|select|textarea)[^>]*name="{name}"[^>]*>', page)
    assert found, name
    return found.group(0)


def test_fields_have_human_labels_real_defaults_and_bounds(client, bob, catalog, settings):
    client.force_login(bob)
    page = client.get("/jobs/new/").content.decode()
    assert '<label for="id_gpus_per_replica">GPUs per replica</label>' in page
    assert '<label for="id_min_gpu_memory_gib">Minimum memory per GPU (GiB)</label>' in page
    assert "placeholder=" not in page
    replicas = _input(page, "replicas")
    assert 'value="1"' in replicas and 'min="1"' in replicas and 'step="1"' in replicas
    assert f'max="{settings.GPUPOOL_MAX_REPLICAS}"' in replicas
    assert 'value="1440"' in _input(page, "max_runtime_minutes")
    assert 'step="0.1"' in _input(page, "cpu_per_replica")
    retries = _input(page, "max_retry")
    assert 'value="3"' in retries and f'max="{settings.GPUPOOL_MAX_RETRY}"' in retries
    # A checkbox sits before its label, on one line.
    assert re.search(
        r'<div class="field check" id="field-requires_bf16">\s*<input type="checkbox"[^>]*>\s*'
        r'<label for="id_requires_bf16">',
        page,
    )
    # Only the chosen requirement's fields show; the other group is hidden.
    assert re.search(r'<div data-requirement="models" id="by-models" hidden>', page)
    assert re.search(r'<div data-requirement="constraints" id="by-constraints">', page)


def test_every_error_in_one_pass_with_a_summary_linking_to_each(client, bob, catalog):
    client.force_login(bob)
    answer = client.post(
        "/jobs/new/",
        {**FORM, "replicas": "0", "image": "not an image", "env": "1BAD=x", "name": ""},
    )
    assert answer.status_code == 400
    page = answer.content.decode()
    summary = page[
        page.index('id="error-summary"') : page.index("</div>", page.index("error-summary"))
    ]
    assert "There are 4 problems" in summary
    for field in ("name", "image", "env", "replicas"):
        assert f'href="#id_{field}"' in summary, field
        assert f'id="id_{field}_error"' in page
        assert 'aria-invalid="true"' in _input(page, field)
    assert Job.objects.count() == 0


def test_the_team_defaults_to_the_last_one_submitted_to(client, bob, vision, catalog):
    research = TeamFactory(name="Research", slug="research")
    Membership.objects.create(user=bob, team=research, role=Role.MEMBER)
    client.force_login(bob)
    assert "selected" not in _input(client.get("/jobs/new/").content.decode(), "team")
    job_submit(user=bob, data=job_body(team="research"))
    page = client.get("/jobs/new/").content.decode()
    team = page[page.index('name="team"') : page.index("</select>", page.index('name="team"'))]
    assert '<option value="research" selected>' in team


def test_a_platform_admin_in_no_team_is_told_why_and_how(client, root, catalog):
    client.force_login(root)
    page = client.get("/jobs/new/").content.decode()
    assert 'id="no-team"' in page and "platform admin" in page
    assert "/admin/portal/membership/add/" in page
    assert 'name="image"' not in page


def test_a_platform_admin_in_a_team_submits_there(client, root, vision, catalog):
    Membership.objects.create(user=root, team=vision, role=Role.ADMIN)
    client.force_login(root)
    assert client.post("/jobs/new/", FORM).status_code == 302
    assert Job.objects.get().owner == root
