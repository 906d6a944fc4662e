"""A user's first job, in a real browser: log in, submit, see it queued, cancel it."""

from __future__ import annotations

import pytest

from portal.models import Job, JobState
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_bob_submits_and_cancels_a_job_in_the_browser(page, live_server, bob, catalog):
    p = page.page
    log_in(p, live_server, "bob")
    p.click("text=Submit")
    p.fill("#id_name", "browser-job")
    p.fill("#id_image", "nvcr.io/nvidia/pytorch:24.05-py3")
    p.fill("#id_command", "python train.py --epochs 1")
    p.fill("#id_gpus_per_replica", "2")
    p.fill("#id_min_gpu_memory_gib", "24")
    p.click("button:has-text('Submit')")
    p.wait_for_selector("h1:has-text('browser-job')")
    assert "QUEUED" in p.inner_text("h1")
    job = Job.objects.get(name="browser-job")
    assert (job.gpus_per_replica, job.min_gpu_memory_gib) == (2, 24)

    p.click("text=Cancel job…")
    p.click("text=Yes, cancel the job")
    p.wait_for_selector("h1 .state-cancelled")
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_a_form_error_is_announced_next_to_the_field(page, live_server, bob, catalog):
    p = page.page
    log_in(p, live_server, "bob")
    p.goto(f"{live_server.url}/jobs/new/")
    p.fill("#id_name", "bad")
    p.fill("#id_image", "not a valid image")
    p.click("button:has-text('Submit')")
    error = p.locator("#field-image.has-error #id_image_error")
    assert "image reference" in error.inner_text()
    assert "image reference" in p.inner_text("#error-summary[role=alert]")
    assert Job.objects.count() == 0


def test_the_state_filter_updates_the_table_without_a_reload(page, live_server, bob, vision):
    from tests.factories import JobFactory

    JobFactory(owner=bob, team=vision, name="running-one", state=JobState.RUNNING)
    JobFactory(owner=bob, team=vision, name="queued-one")
    p = page.page
    log_in(p, live_server, "bob")
    assert p.locator("text=queued-one").count() == 1
    p.evaluate("window.__marker = 1")  # survives only if the page is not reloaded
    p.check("input[name=state][value=RUNNING]")
    p.wait_for_selector("text=queued-one", state="detached")
    assert p.locator("text=running-one").count() == 1
    assert p.evaluate("window.__marker") == 1
    assert "state=RUNNING" in p.url
    assert page.console_errors == []
