"""An inference job's Serving box in headless Chromium: the endpoint, the curl line, and the
copy button portal.js wires up (no inline script under the page's CSP)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from portal.models import JobState
from tests.browser.conftest import log_in, wait_until
from tests.builders import running_row

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

URL = "http://gp-0123-serve.gpupool.svc.cluster.local:8000"


def test_a_ready_inference_job_shows_its_endpoint_and_copies_the_curl_line(
    page, live_server, bob, vision, catalog
):
    job = running_row(
        team=vision,
        owner=bob,
        kind="inference",
        port=8000,
        readiness_path="/health",
        endpoint_url=URL,
        endpoint_kind="clusterip",
        endpoint_ready=True,
    )
    p = page.page
    p.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    box = p.locator("#serving")
    expect(box.locator("h2")).to_have_text("Serving")
    expect(box.locator("#endpoint-url")).to_have_text(URL)
    expect(box.locator("#curl-line")).to_have_text(f"curl -sS {URL}/health")
    button = box.locator("button[data-copy]")
    expect(button).to_be_visible()  # shown by portal.js where the Clipboard API exists
    button.click()
    expect(button).to_have_text("Copied")
    assert p.evaluate("navigator.clipboard.readText()") == f"curl -sS {URL}/health"
    assert page.console_errors == []


def test_an_inference_job_not_ready_yet_says_what_it_waits_for(
    page, live_server, bob, vision, catalog
):
    job = running_row(team=vision, owner=bob, kind="inference", port=8000, endpoint_url=URL)
    assert job.state == JobState.RUNNING and not job.endpoint_ready
    p = page.page
    log_in(p, live_server, "bob", next_url=f"/jobs/{job.public_id}/")
    wait_until(p, "!!document.querySelector('#serving-wait')")
    expect(p.locator("#serving-wait")).to_contain_text(
        "Starting: waiting for readiness on port 8000"
    )
    expect(p.locator("#curl-line")).to_have_count(0)
