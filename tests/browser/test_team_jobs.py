"""Team jobs in a real browser, as Vision's team admin: search by name, filter by owner,
sort by how long jobs ran, tick jobs and cancel them with one reason; Language's jobs are
neither listed nor cancellable."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from portal.models import JobState
from scheduling.models import GpuModel, UsageRecord
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(p, name: str, *, full_page: bool = False) -> None:
    """Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the README's picture."""
    where = os.environ.get("GPUPOOL_SCREENSHOT_DIR")
    if where:
        p.set_viewport_size({"width": 1400, "height": 900})
        p.screenshot(path=str(Path(where) / name), full_page=full_page)


def test_a_team_admin_finds_and_bulk_cancels_jobs_of_the_team(
    page, live_server, alice, bob, vision, charlie, language
):
    now = timezone.now()
    slow = JobFactory(
        team=vision,
        owner=bob,
        name="bert-slow",
        state=JobState.RUNNING,
        started_at=now - dt.timedelta(hours=2),
        cluster=None,
    )
    quick = JobFactory(team=vision, owner=bob, name="bert-queued")
    mine = JobFactory(team=vision, owner=alice, name="resnet")
    theirs = JobFactory(team=language, owner=charlie, name="bert-language")
    p = page.page
    log_in(p, live_server, "alice", next_url="/jobs/?scope=team")
    rows = p.locator("#job-table tbody tr")
    expect(rows).to_have_count(3)
    expect(p.locator("#job-table")).not_to_contain_text("bert-language")

    p.select_option("#owner", "bob")  # htmx swaps the table in place
    expect(rows).to_have_count(2)
    p.select_option("#sort", "duration")
    expect(rows.first).to_contain_text("bert-slow")
    expect(rows.first).to_contain_text("2 h 00 min")
    p.fill("#q", "queued")
    p.press("#q", "Enter")
    expect(rows).to_have_count(1)
    p.fill("#q", "")
    p.press("#q", "Enter")
    expect(rows).to_have_count(2)

    assert axe_violations(p) == []  # with the owner filter, search, sort and checkboxes
    p.check("input[data-select-all]")  # ticks every job of the list that can be cancelled
    expect(p.locator("input[aria-label='Select bert-slow']")).to_be_checked()
    expect(p.locator("input[aria-label='Select bert-queued']")).to_be_checked()
    p.fill("#bulk-reason", "Cluster maintenance tonight")
    _shot(p, "team-jobs.png")
    p.click("#bulk-cancel button[type=submit]")
    expect(p.locator(".messages")).to_contain_text("Cancelled 2 jobs.")
    assert "owner=bob" in p.url  # back to the same filtered list
    for job in (slow, quick):
        job.refresh_from_db()
        assert job.cancel_reason == "Cluster maintenance tonight"
        assert job.state in (JobState.CANCELLED, JobState.CANCELLING)
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.state == JobState.QUEUED and theirs.state == JobState.QUEUED

    p.goto(f"{live_server.url}/jobs/{quick.public_id}/")
    expect(p.locator(".timeline")).to_contain_text("Cluster maintenance tonight")


def test_the_team_usage_page_shows_a_total_per_user(page, live_server, alice, bob, vision, catalog):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
    a100 = GpuModel.objects.get(key="a100-80gb")
    UsageRecord.objects.create(
        team=vision, user=bob, gpu_model=a100, hour=hour, gpu_hours=6, weighted_gpu_hours=6
    )
    UsageRecord.objects.create(
        team=vision, user=alice, gpu_model=a100, hour=hour, gpu_hours=2, weighted_gpu_hours=2
    )
    p = page.page
    log_in(p, live_server, "alice", next_url="/usage/?scope=vision")
    rows = p.locator("#usage-user-totals tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("bob")
    expect(rows.first).to_contain_text("75 %")
    expect(rows.nth(1)).to_contain_text("alice")
    expect(rows.nth(1)).to_have_class("mine")
