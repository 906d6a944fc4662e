"""Platform admins edit GPU models, offer a card as a shared pool and edit a team's policy in
the portal, in Chromium: each edit shows what it would affect, counted from the real jobs,
before it is saved; a team admin and a member find no link and get a 403 (issue 32).
Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the docs' pictures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node
from portal.models import JobState
from scheduling.models import GpuModel, QuotaChange, TeamPolicy
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def t4_queue(catalog, vision, language, bob, charlie):
    """Jobs that can run only on T4 (vision 3) or on T4 first (language 2), and T4 nodes."""
    cluster = Cluster.objects.create(name="east", api_url="https://east.k8s.test")
    t4 = GpuModel.objects.get(key="t4")
    for i in range(2):
        Node.objects.create(
            cluster=cluster,
            name=f"t4-{i}",
            gpu_model=t4,
            gpu_allocatable=4,
            last_seen_at=timezone.now(),
        )
    for _ in range(3):
        JobFactory(team=vision, owner=bob, state=JobState.QUEUED, gpu_models=["t4"])
    for _ in range(2):
        JobFactory(
            team=language, owner=charlie, state=JobState.QUEUED, gpu_models=["t4", "a100-80gb"]
        )
    return t4


def _shots(tmp_path: Path) -> Path:
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def test_disabling_a_model_shows_the_queued_jobs_it_strands_before_saving(
    page, live_server, root, t4_queue, tmp_path
):
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "root", next_url="/quotas/")
    p.get_by_role("link", name="GPU models and shared pools").click()
    p.wait_for_url(f"{live_server.url}/catalog/")
    row = p.locator('tr[data-model="t4"]')
    assert "2" in row.locator("td").nth(6).inner_text()  # its nodes
    p.get_by_role("link", name="Edit t4").click()
    p.get_by_label("Takes new jobs").uncheck()
    p.get_by_role("button", name="Review changes").click()
    effects = p.locator("[data-effects]")
    text = effects.inner_text()
    assert "model disabled: 5 queued jobs can no longer run on it (vision 3, language 2)" in text
    assert "3 queued jobs of these would match no model at all" in text
    assert "2 nodes (8 GPUs) of it take no new jobs" in text
    assert GpuModel.objects.get(key="t4").active  # nothing saved yet
    assert axe_violations(p) == []  # the review, warnings and all, reads as well as the form
    p.screenshot(path=str(_shots(tmp_path) / "gpu-model-review.png"), full_page=True)
    p.get_by_role("button", name="Save these changes").click()
    p.wait_for_url(f"{live_server.url}/catalog/")
    assert "Saved t4: 1 field." in p.inner_text(".messages")
    assert not GpuModel.objects.get(key="t4").active
    assert "t4 takes new jobs: yes → no" in p.inner_text(".audit")
    assert page.console_errors == []


def test_offering_a_card_as_a_shared_pool_from_its_page(page, live_server, root, catalog):
    p = page.page
    log_in(p, live_server, "root", next_url="/catalog/")
    p.locator('tr[data-model="a100-80gb"]').get_by_role(
        "link", name="Offer as shared pool…"
    ).click()
    p.wait_for_url(f"{live_server.url}/catalog/a100-80gb/share/")
    text = p.inner_text("[data-effects]")
    assert "jobs ask for GiB of one a100-80gb device (at most 80 GiB a replica)" in text
    assert "no team has quota on it yet" in text
    p.get_by_role("button", name="Offer as shared pool").click()
    p.wait_for_url(f"{live_server.url}/catalog/")
    assert "a100-80gb is offered as the shared pool a100-80gb-shared" in p.inner_text(".messages")
    row = p.locator('tr[data-model="a100-80gb-shared"]')
    assert "shares a100-80gb (unit: GiB)" in row.inner_text()
    assert GpuModel.objects.get(key="a100-80gb-shared").shares.key == "a100-80gb"


def test_a_lower_queue_limit_names_the_jobs_beyond_it_before_saving(
    page, live_server, root, t4_queue, vision, tmp_path
):
    p = page.page
    p.set_viewport_size({"width": 1400, "height": 900})
    log_in(p, live_server, "root", next_url="/quotas/")
    p.get_by_role("link", name="Team policies").first.click()
    p.wait_for_url(f"{live_server.url}/policies/")
    p.get_by_role("link", name="Edit the policy of Vision").click()
    p.get_by_label("Queued jobs limit, team (empty: the pool's default)").fill("1")
    p.get_by_label("Queued jobs limit, each member (empty: the pool's default)").fill("abc")
    p.get_by_role("button", name="Review changes").click()
    assert "max_queued_jobs_per_user" in p.inner_text("[data-error-summary]")
    assert axe_violations(p) == []
    p.get_by_label("Queued jobs limit, each member (empty: the pool's default)").fill("")
    p.get_by_role("button", name="Review changes").click()
    text = p.inner_text("[data-effects]")
    assert (
        "2 queued jobs of team vision would exceed the new queue limit (3 queued, limit 1)" in text
    )
    p.screenshot(path=str(_shots(tmp_path) / "team-policy-review.png"), full_page=True)
    p.get_by_role("button", name="Save these changes").click()
    p.wait_for_url(f"{live_server.url}/policies/")
    assert TeamPolicy.objects.get(team=vision).max_queued_jobs == 1
    assert QuotaChange.objects.filter(team=vision, field="max_queued_jobs").count() == 1
    # the one console line is the bad value's 400, which is what bad input is
    assert [e for e in page.console_errors if "400 (Bad Request)" not in e] == []


@pytest.mark.parametrize("username", ["alice", "bob"])
def test_team_admins_and_members_find_no_link_and_get_403(
    page, live_server, catalog, alice, bob, username
):
    p = page.page
    log_in(p, live_server, username, next_url="/quotas/")
    assert p.locator("[data-admin-links]").count() == 0
    assert p.get_by_role("link", name="Team policies").count() == 0
    for url in ("/catalog/", "/catalog/t4/share/", "/policies/vision/"):
        response = p.goto(f"{live_server.url}{url}")
        assert response.status == 403, url
