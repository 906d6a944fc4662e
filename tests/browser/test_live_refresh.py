"""The job page's live refresh, in headless Chromium: when the job ends while the page is open,
the refresh takes "Cancel job…" away with it (issue 32), and the cancel it offered before says
what cancelling does to a job in that state; "Could it start sooner?" goes once it is admitted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from portal.jobs.state import job_transition
from portal.models import JobState
from tests.browser.conftest import log_in, wait_until
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _clean(page) -> None:
    assert page.console_errors == []
    assert page.foreign_requests() == []


def test_the_cancel_button_goes_when_the_refresh_finds_the_job_succeeded(
    page, live_server, bob, vision
):
    started = timezone.now() - dt.timedelta(minutes=10)
    job = JobFactory(
        owner=bob, team=vision, name="train", state=JobState.RUNNING, started_at=started
    )
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    assert p.locator("#job-actions >> text=Cancel job…").count() == 1
    assert job_transition(
        job_id=job.pk, expected=JobState.RUNNING, to=JobState.SUCCEEDED, reason="Completed"
    )
    # No reload: the page's own refresh (every 5 s) finds it ended.
    wait_until(p, "document.querySelector('#job-live h1 .state-succeeded') !== null", timeout=15)
    wait_until(p, "!document.querySelector('#job-actions').textContent.includes('Cancel job')")
    assert p.locator("#job-actions >> text=Resubmit…").count() == 1  # the rest stays
    assert p.locator("#job-live").get_attribute("hx-get") is None  # and refreshing stops
    assert "SUCCEEDED" in p.inner_text("#job-timeline")
    _clean(page)


def test_cancelling_a_queued_job_talks_of_the_queue_not_of_pods(page, live_server, bob, vision):
    job = JobFactory(owner=bob, team=vision, name="waiting")
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    p.click("text=Cancel job…")
    p.wait_for_selector("#cancel-effect")
    effect = p.inner_text("#cancel-effect")
    assert "out of the queue" in effect and "pods" in effect and "stops its pods" not in effect
    p.click("text=Yes, cancel the job")
    p.wait_for_selector("h1 .state-cancelled")
    assert p.locator("#job-actions >> text=Cancel job…").count() == 0
    _clean(page)


def test_could_it_start_sooner_goes_when_the_refresh_finds_the_job_admitted(
    page, live_server, bob, vision
):
    job = JobFactory(owner=bob, team=vision, name="soon")
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    assert p.get_by_role("heading", name="Could it start sooner?").is_visible()
    assert job_transition(
        job_id=job.pk, expected=JobState.QUEUED, to=JobState.ADMITTED, reason="Admitted"
    )
    # No reload: the page's own refresh finds it admitted and takes the question away.
    wait_until(p, "document.querySelector('#job-live h1 .state-admitted') !== null", timeout=15)
    wait_until(p, "!document.body.innerText.includes('Could it start sooner?')")
    assert p.locator("#estimate-alternatives").count() == 0
    # and a page opened on a job past the queue never shows it
    p.reload()
    p.wait_for_selector("#job-live h1 .state-admitted")
    assert "Could it start sooner?" not in p.inner_text("main")
    _clean(page)
