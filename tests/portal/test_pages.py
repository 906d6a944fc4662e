"""The server-rendered pages, through Django's test client as a browser would use them."""

from __future__ import annotations

import re

import pytest

from portal.models import Job, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

FORM = {
    "team": "vision",
    "name": "bert-finetune",
    "kind": "training",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": "torchrun train.py --epochs 3",
    "env": "BATCH_SIZE=64\nLR=3e-4",
    "replicas": "2",
    "gpus_per_replica": "4",
    "requirement": "constraints",
    "min_gpu_memory_gib": "40",
    "requires_bf16": "on",
    "selection_policy": "cheapest",
    "allow_fallback": "on",
    "priority": "normal",
    "max_runtime_minutes": "120",
}


def test_login_then_land_on_the_pool_overview(client, bob):
    response = client.post("/login/", {"username": "bob", "password": "pw-for-tests"}, follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert "GPU pool" in response.content.decode()
    assert "My jobs" in response.content.decode()


def test_pages_need_a_login(client):
    for url in ("/jobs/", "/jobs/new/", "/tokens/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_submitting_the_form_queues_the_job_and_shows_it(client, bob, catalog):
    client.force_login(bob)
    response = client.post("/jobs/new/", FORM, follow=True)
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == f"/jobs/{job.public_id}/"
    assert job.command == ["torchrun", "train.py", "--epochs", "3"]
    assert job.env == {"BATCH_SIZE": "64", "LR": "3e-4"}
    assert (job.min_gpu_memory_gib, job.requires_bf16, job.max_runtime_seconds) == (40, True, 7200)
    page = response.content.decode()
    assert "bert-finetune" in page and "QUEUED" in page and "Submitted" in page


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpus_per_replica", "0"),
        ("image", "no spaces allowed"),
        ("env", "1BAD=x"),
        ("command", "python 'unclosed"),
        ("min_gpu_memory_gib", "9999"),
    ],
)
def test_a_bad_field_is_shown_next_to_it_and_nothing_is_stored(client, bob, catalog, field, value):
    client.force_login(bob)
    response = client.post("/jobs/new/", {**FORM, field: value})
    assert response.status_code == 400
    page = response.content.decode()
    # The error sits in the field's own block.
    block = re.search(
        rf'<div class="field has-error" id="field-{field}">\s*<label for="id_{field}"', page
    )
    assert block, f"no error shown for {field}"
    assert Job.objects.count() == 0


def test_explicit_models_from_the_form_keep_their_order(client, bob, catalog):
    client.force_login(bob)
    data = {
        **FORM,
        "requirement": "models",
        "gpu_models": ["t4", "l4"],  # as the multi-select sends them (catalog order)
        "gpu_models_order": "l4,t4",  # the order they were picked in (the form's script)
        "selection_policy": "ordered",
    }
    client.post("/jobs/new/", data)
    job = Job.objects.get()
    assert (job.gpu_models, job.min_gpu_memory_gib, job.requires_bf16) == (
        ["l4", "t4"],
        None,
        False,
    )


def test_a_viewer_sees_no_submit_form(client, victor, catalog):
    client.force_login(victor)
    page = client.get("/jobs/new/").content.decode()
    assert "cannot submit" in page
    assert 'name="image"' not in page


def test_state_filter_and_team_scope(client, alice, bob, vision):
    JobFactory(owner=bob, team=vision, name="bobs-running", state=JobState.RUNNING)
    JobFactory(owner=bob, team=vision, name="bobs-queued")
    client.force_login(alice)
    mine = client.get("/jobs/").content.decode()
    assert "bobs-running" not in mine and "No jobs here yet" in mine
    team = client.get("/jobs/?scope=team&state=RUNNING").content.decode()
    assert "bobs-running" in team and "bobs-queued" not in team


def test_htmx_filter_returns_only_the_table(client, bob, vision):
    JobFactory(owner=bob, team=vision, name="x1")
    client.force_login(bob)
    fragment = client.get("/jobs/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="job-table">')
    assert "<html" not in fragment


def test_job_list_pages_by_keyset(client, bob, vision):
    JobFactory.create_batch(55, owner=bob, team=vision)
    client.force_login(bob)
    first = client.get("/jobs/").content.decode()
    assert first.count('href="/jobs/') - first.count('href="/jobs/new') >= 50
    older = re.search(r'href="\?([^"]*before=\d+[^"]*)">Older', first)
    assert older
    second = client.get("/jobs/?" + older.group(1).replace("&amp;", "&")).content.decode()
    assert "Older" not in second and "Newest" in second


def test_the_job_list_query_count_is_constant(client, bob, vision, django_assert_max_num_queries):
    client.force_login(bob)
    JobFactory.create_batch(5, owner=bob, team=vision)
    # 8: the team scope reads the caller's roles (bulk cancel) and lists the owners once
    with django_assert_max_num_queries(8):
        client.get("/jobs/?scope=team")
    JobFactory.create_batch(45, owner=bob, team=vision)
    with django_assert_max_num_queries(8):
        client.get("/jobs/?scope=team")


def test_cancel_asks_first_then_cancels(client, bob, vision):
    job = JobFactory(owner=bob, team=vision)
    client.force_login(bob)
    confirm = client.get(f"/jobs/{job.public_id}/cancel/").content.decode()
    assert "Yes, cancel the job" in confirm
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    page = client.post(f"/jobs/{job.public_id}/cancel/", follow=True).content.decode()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert "cancelled" in page.lower()


def test_cancelling_a_finished_job_on_the_page_says_why(client, bob, vision):
    job = JobFactory(owner=bob, team=vision, state=JobState.FAILED)
    client.force_login(bob)
    page = client.post(f"/jobs/{job.public_id}/cancel/", follow=True).content.decode()
    assert "already FAILED" in page


def test_a_new_token_is_shown_once(client, bob):
    client.force_login(bob)
    created = client.post("/tokens/", {"name": "laptop"}).content.decode()
    token = re.search(r'<code id="new-token">(gpp_[^<]+)</code>', created).group(1)
    again = client.get("/tokens/").content.decode()
    assert token not in again
    assert token[:12] in again  # the lookup prefix identifies it


def test_scripts_and_styles_come_from_the_portal_itself(client, bob):
    client.force_login(bob)
    for url in ("/jobs/", "/api/docs/"):
        page = client.get(url).content.decode()
        assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css)[^"]*)"', page)
        assert assets, url
        for asset in assets:
            assert asset.startswith("/static/"), f"{url} loads {asset} from elsewhere"
            response = client.get(asset)
            assert response.status_code == 200, asset


def test_the_form_takes_env_from_secrets_as_name_secret_key_lines(client, bob, catalog):
    client.force_login(bob)
    bad = client.post("/jobs/new/", {**FORM, "env_from_secrets": "HF_TOKEN=hf-credentials"})
    assert bad.status_code == 400
    assert "Line 1: expected NAME=secret/key." in bad.content.decode()
    secret_in_env = client.post("/jobs/new/", {**FORM, "env": "HF_TOKEN=hf_abc"})
    assert "HF_TOKEN looks like a secret" in secret_in_env.content.decode()
    assert not Job.objects.exists()
    response = client.post(
        "/jobs/new/", {**FORM, "env_from_secrets": "HF_TOKEN = hf-credentials/token\n"}
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.env_from_secrets == {"HF_TOKEN": {"secret": "hf-credentials", "key": "token"}}
    page = client.get(f"/jobs/{job.public_id}/").content.decode()
    assert "<code>HF_TOKEN</code> ← Secret <code>hf-credentials</code>, key <code>token</code>" in (
        page
    )
