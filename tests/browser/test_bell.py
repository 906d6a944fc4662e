"""The bell in a real browser: it opens the newest notifications in a panel under it, marks
them read (the count goes, and stays gone on the next page), closes on Escape with focus
back on it; without JavaScript it is a link to the same list as a page."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from portal.models import Notification
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(p, name: str, *, full_page: bool = False) -> None:
    """Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the docs' picture."""
    where = os.environ.get("GPUPOOL_SCREENSHOT_DIR")
    if where:
        p.set_viewport_size({"width": 1400, "height": 900})
        p.screenshot(path=str(Path(where) / name), full_page=full_page)


def _notify(user, job, title: str) -> Notification:
    return Notification.objects.create(
        user=user, job=job, kind="job.failed", title=title, created_at=timezone.now()
    )


def test_the_bell_opens_recent_notifications_and_marks_them_read(page, live_server, bob, charlie):
    job = JobFactory(owner=bob, team=bob.memberships.first().team, name="resnet")
    for i in range(3):
        _notify(bob, job, f"resnet failed, try {i}")
    _notify(charlie, None, "not for bob")
    p = page.page
    log_in(p, live_server, "bob")
    bell = p.locator("#bell")
    expect(bell.locator(".bell-count")).to_have_text("3 unread")
    expect(bell).to_have_attribute("aria-expanded", "false")

    bell.click()
    panel = p.locator("#bell-panel")
    expect(panel).to_be_visible()
    expect(bell).to_have_attribute("aria-expanded", "true")
    expect(panel.locator("li.unread")).to_have_count(3)
    expect(panel).to_contain_text("resnet failed, try 2")
    expect(panel).not_to_contain_text("not for bob")
    expect(bell.locator(".bell-count")).to_have_count(0)
    assert p.url == f"{live_server.url}/jobs/"  # a panel, not a page
    assert axe_violations(p) == []  # the open panel too
    _shot(p, "bell.png")
    assert Notification.objects.filter(user=bob, read_at__isnull=True).count() == 0

    p.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(bell).to_be_focused()

    p.reload()  # read stays read; reopened, nothing is new
    expect(p.locator("#bell .bell-count")).to_have_count(0)
    p.locator("#bell").click()
    expect(p.locator("#bell-panel li")).to_have_count(3)
    expect(p.locator("#bell-panel li.unread")).to_have_count(0)
    panel.get_by_role("link", name="resnet failed, try 2").click()
    p.wait_for_url(f"{live_server.url}/jobs/{job.public_id}/")
    assert not page.console_errors


def test_without_javascript_the_bell_is_a_page(browser, live_server, bob):
    job = JobFactory(owner=bob, team=bob.memberships.first().team, name="bert")
    _notify(bob, job, "bert failed")
    context = browser.new_context(java_script_enabled=False)
    p = context.new_page()
    try:
        log_in(p, live_server, "bob")
        p.click("#bell")
        p.wait_for_url(f"{live_server.url}/notifications/recent/")
        expect(p.locator("h1")).to_have_text("Recent notifications")
        expect(p.locator("li.unread")).to_contain_text("bert failed")
        assert Notification.objects.get(user=bob).read_at is not None
        p.click("text=All notifications")
        p.wait_for_url(f"{live_server.url}/notifications/")
    finally:
        context.close()


def test_on_a_phone_the_panel_fits_the_screen(browser, live_server, bob):
    job = JobFactory(owner=bob, team=bob.memberships.first().team, name="gpt")
    _notify(bob, job, "gpt failed with a rather long title that has to wrap on a phone screen")
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    p = context.new_page()
    try:
        log_in(p, live_server, "bob")
        p.locator("#bell").click()
        panel = p.locator("#bell-panel")
        expect(panel).to_contain_text("gpt failed")
        box = panel.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        assert p.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    finally:
        context.close()
