"""The Content-Security-Policy in a real browser: every page the portal serves renders and
works with no violation (the ``page`` fixture fails a test on any), and the net really
catches one."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from portal.models import JobState
from scheduling.models import TeamPolicy
from tests.browser.conftest import log_in, member_pages
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_net_catches_an_inline_script_and_an_eval(page, live_server):
    """An inline script and an eval, served under the portal's own policy header: both are
    refused and reported (then forgotten here, so this test itself passes)."""
    p = page.page
    policy = {}

    def portal_page_with_inline_script(route):
        response = route.fetch(url=f"{live_server.url}/login/")
        policy["header"] = response.headers["content-security-policy"]
        html = response.text().replace(
            "</body>",
            '<script>window.__inline = 1; setTimeout("window.__evaled = 1", 0);</script></body>',
        )
        route.fulfill(response=response, body=html)

    def portal_script_with_eval(route):
        route.fulfill(body='window.__evaled = eval("1 + 1");', content_type="text/javascript")

    p.route(f"{live_server.url}/login/", portal_page_with_inline_script)
    p.route("**/static/js/portal.js", portal_script_with_eval)
    p.goto(f"{live_server.url}/login/")
    p.wait_for_load_state("networkidle")
    assert "script-src 'self'" in policy["header"]
    assert p.evaluate("window.__inline === undefined && window.__evaled === undefined")
    events = [v for v in page.csp_violations if isinstance(v, dict)]
    assert {(v["directive"], v["blocked"]) for v in events} >= {
        ("script-src-elem", "inline"),
        ("script-src", "eval"),
    }, page.csp_violations
    page.csp_violations.clear()


def test_every_page_a_member_sees_works_under_the_policy(page, live_server, bob, vision, catalog):
    job = JobFactory(owner=bob, team=vision, name="csp-job", state=JobState.RUNNING)
    TeamPolicy.objects.create(team=vision, max_priority=50)
    p = page.page
    log_in(p, live_server, "bob")
    for path in member_pages(job):
        response = p.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        header = response.headers["content-security-policy"]
        assert "script-src 'self'" in header and "unsafe-eval" not in header, path
        p.wait_for_load_state("networkidle")
    # The queue's filters submit themselves, from the portal's script, not an inline handler.
    p.goto(f"{live_server.url}/queue/")
    with p.expect_navigation():
        p.select_option("#team", "vision")
    assert "team=vision" in p.url
    # htmx works without eval: configured off, and the submit form's match preview still runs.
    p.goto(f"{live_server.url}/jobs/new/")
    assert p.evaluate("htmx.config.allowEval === false && !htmx.config.includeIndicatorStyles")
    p.wait_for_selector("#match-preview .match-absent")  # the preview on load: any GPU
    p.fill("#id_min_gpu_memory_gib", "40")
    p.dispatch_event("#id_min_gpu_memory_gib", "change")
    # Here no cluster has any model: the preview says so, and its collapsed list of matches
    # follows the requirement (no 16 or 24 GiB card left), opened by its summary.
    absent = p.locator("#match-preview .match-absent")
    models = absent.locator("small")
    expect(models).not_to_contain_text(re.compile(r"\b(t4|v100-16gb|l4|a10)\b"))
    expect(p.locator("#match-preview")).to_contain_text("No cluster has a model")
    expect(models).to_be_hidden()
    # The typing's own refresh (300 ms after the last key) done: a click landing on the list
    # while a refresh replaces it would open the list being thrown away.
    p.wait_for_timeout(400)
    p.wait_for_function("!document.querySelector('#match-preview.htmx-request')")
    absent.locator("summary").click()
    expect(models).to_be_visible()
    expect(models).to_contain_text("a100-80gb")
    # A list the user opened stays open while the preview follows their typing.
    p.fill("#id_min_gpu_memory_gib", "60")
    expect(models).not_to_contain_text("a100-40gb")
    expect(models).to_be_visible()
    assert page.console_errors == []


def test_the_api_docs_and_the_admin_work_under_the_policy(page, live_server, root, catalog):
    p = page.page
    log_in(p, live_server, "root", next_url="/admin/")
    for path in ("/admin/", "/admin/auth/user/", f"/admin/auth/user/{root.pk}/change/"):
        assert p.goto(f"{live_server.url}{path}").status == 200, path
        p.wait_for_load_state("networkidle")
    p.goto(f"{live_server.url}/api/docs/")
    p.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert p.locator(".swagger-ui .opblock").count() > 10
    assert page.foreign_requests() == []
