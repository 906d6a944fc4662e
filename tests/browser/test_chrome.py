"""The frame around every page, in Chromium: the nav says which page is shown and fits one row
on a 1400 px screen, times read in the browser's own time zone (UTC on hover, and without
JavaScript), and the dark theme follows the system's setting with every page still WCAG AA."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from portal.models import Job, JobState, Membership, Role
from tests.browser.conftest import PageRecorder, log_in, member_pages, wait_until
from tests.browser.test_accessibility import axe_violations
from tests.browser.test_dashboards import demo_pool  # noqa: F401  (fixture)
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE = {"viewport": {"width": 1400, "height": 900}}


def _current(p: Any) -> list[str]:
    return p.eval_on_selector_all(
        "#main-nav a[aria-current=page]", "links => links.map(a => a.textContent.trim())"
    )


def _rows(p: Any, selector: str) -> set[int]:
    """The distinct top edges (px) of the elements: one value is one row."""
    return set(
        p.eval_on_selector_all(
            selector, "els => els.map(e => Math.round(e.getBoundingClientRect().top))"
        )
    )


def test_the_nav_marks_the_page_shown_and_fits_one_row_at_1400_px(
    browser, live_server, bob, root, vision, catalog
):
    context = browser.new_context(**WIDE)
    recorder = PageRecorder(context.new_page())
    p = recorder.page
    log_in(p, live_server, "bob", next_url="/queue/")
    assert _current(p) == ["Queue"]
    # My jobs and Team jobs share a path: the scope tells them apart
    p.goto(f"{live_server.url}/jobs/?scope=team")
    assert _current(p) == ["Team jobs"]
    p.goto(f"{live_server.url}/jobs/")
    assert _current(p) == ["My jobs"]
    underline = p.evaluate(
        "getComputedStyle(document.querySelector('#main-nav a[aria-current=page]'))"
        ".textDecorationLine"
    )
    assert "underline" in underline  # seen, not only announced
    p.goto(f"{live_server.url}/jobs/new/")
    assert _current(p) == ["Submit"]
    # a page that is not in the nav marks nothing
    p.goto(f"{live_server.url}/notifications/")
    assert _current(p) == []
    # one row: every link, the brand, the bell and the log-out button
    assert len(_rows(p, "#main-nav a")) == 1
    header = p.locator("header.top").bounding_box()
    assert header is not None and header["height"] < 60, header
    assert recorder.console_errors == []
    context.close()
    # a platform admin who is also a team's admin has every link (Submit, My teams, Admin)
    Membership.objects.create(user=root, team=vision, role=Role.ADMIN)
    context = browser.new_context(**WIDE)
    p = context.new_page()
    log_in(p, live_server, "root", next_url="/quotas/")
    assert _current(p) == ["Quotas"]
    links = p.locator("#main-nav a").all_inner_texts()
    assert {"Submit", "My teams", "Admin"} <= set(links), links
    assert len(_rows(p, "#main-nav a")) == 1, links
    header = p.locator("header.top").bounding_box()
    assert header is not None and header["height"] < 60, header
    context.close()


def test_times_read_in_the_browsers_time_zone_with_utc_on_hover(browser, live_server, bob, vision):
    submitted = dt.datetime(2026, 3, 1, 23, 40, tzinfo=dt.UTC)
    job = JobFactory(owner=bob, team=vision, name="tz-job", state=JobState.QUEUED)
    Job.objects.filter(pk=job.pk).update(submitted_at=submitted)
    # India is UTC+05:30 and keeps no summer time: 23:40 UTC is 05:10 the next day there
    context = browser.new_context(timezone_id="Asia/Kolkata", locale="en-US")
    p = context.new_page()
    log_in(p, live_server, "bob", next_url="/jobs/")
    cell = p.locator("table.jobs time").first
    assert cell.inner_text() == "2026-03-02 05:10 GMT+5:30"
    assert cell.get_attribute("title") == "2026-03-01 23:40 UTC"
    # the job's timeline (seconds kept) and a refresh that swaps the list in again
    p.goto(f"{live_server.url}/jobs/{job.public_id}/")
    submitted = p.locator("#job-facts time, .facts time").first
    assert submitted.inner_text() == "2026-03-02 05:10:00 GMT+5:30"
    # the page refreshes itself every 5 s (the timeline swapped in out of band): still local
    p.evaluate("document.querySelector('#job-live').dataset.before = '1'")
    wait_until(p, "!document.querySelector('#job-live').dataset.before", timeout=15)
    p.wait_for_timeout(200)
    assert submitted.inner_text() == "2026-03-02 05:10:00 GMT+5:30"
    context.close()
    # without JavaScript the server's UTC stands, and says so
    context = browser.new_context(timezone_id="Asia/Kolkata", java_script_enabled=False)
    p = context.new_page()
    log_in(p, live_server, "bob", next_url="/jobs/")
    assert p.locator("table.jobs time").first.inner_text() == "2026-03-01 23:40 UTC"
    context.close()


def test_the_dark_theme_follows_the_system_and_keeps_every_page_aa(
    browser,
    live_server,
    demo_pool,  # noqa: F811
):
    context = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 900})
    recorder = PageRecorder(context.new_page())
    p = recorder.page
    log_in(p, live_server, "bob", next_url="/")
    background = p.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 20, 28)", background
    job = Job.objects.get(name="notebook-idle")
    shots = os.environ.get("GPUPOOL_SCREENSHOT_DIR") and Path(os.environ["GPUPOOL_SCREENSHOT_DIR"])
    found = {}
    for path in member_pages(job, demo_pool.name):
        response = p.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        p.wait_for_load_state("networkidle")
        if p.locator("figure[data-chart] .chart-canvas").count():
            p.wait_for_selector("figure[data-chart][data-drawn]")
        violations = axe_violations(p, exclude=("#swagger-ui",) if path == "/api/docs/" else ())
        if violations:
            found[path] = violations
        if shots and path in ("/", "/jobs/new/", "/quotas/"):
            name = path.strip("/").replace("/", "-") or "pool"
            p.screenshot(path=str(shots / f"dark-{name}.png"), full_page=True)
    assert found == {}
    assert recorder.console_errors == []
    context.close()
    # the light theme stays the default
    context = browser.new_context(color_scheme="light")
    p = context.new_page()
    p.goto(f"{live_server.url}/login/")
    assert p.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
    context.close()
