"""Every page a member and a platform admin see, scanned by axe-core in Chromium: no serious
or critical violation (WCAG 2.1 A and AA rules, contrast included).

axe-core comes from the ``axe-playwright-python`` package (its bundled ``axe.min.js``, pinned
in requirements-dev.txt): nothing is fetched at test time. It is put into the page with
``page.evaluate``, which goes through the DevTools protocol and so is not refused by the
page's Content-Security-Policy (a ``<script>`` tag with its text would be); the policy stays
on, so the ``page`` fixture still fails on any violation the pages cause themselves.
"""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.base import AXE_SCRIPT

from clusters.models import Cluster
from portal.models import Job, Team
from scheduling.models import GpuModel
from tests.browser.conftest import log_in, member_pages
from tests.browser.test_dashboards import demo_pool  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SERIOUS = {"serious", "critical"}
RULES = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}


def axe_violations(p: Any, *, exclude: tuple[str, ...] = ()) -> list[str]:
    """The page's serious and critical violations, one line each (rule, impact, where)."""
    if not p.evaluate("typeof window.axe !== 'undefined'"):
        p.evaluate(AXE_SCRIPT)
    context = {"include": [["html"]], "exclude": [[s] for s in exclude]}
    results = p.evaluate("([context, options]) => axe.run(context, options)", [context, RULES])
    found = []
    for v in results["violations"]:
        if v["impact"] in SERIOUS:
            where = "; ".join(
                " ".join(n["target"]) + " " + n.get("failureSummary", "")[:160]
                for n in v["nodes"][:4]
            )
            found.append(f"{v['id']} ({v['impact']}): {v['help']} at {where}")
    return found


def scan(page: Any, live_server: Any, paths: list[str]) -> dict[str, list[str]]:
    p = page.page
    found: dict[str, list[str]] = {}
    for path in paths:
        response = p.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        p.wait_for_load_state("networkidle")
        if p.locator("figure[data-chart] .chart-canvas").count():
            p.wait_for_selector("figure[data-chart][data-drawn]")
        # Swagger UI is a vendored page of its own (drf-spectacular-sidecar): the portal answers
        # for its bar, not for the explorer's internals.
        violations = axe_violations(p, exclude=("#swagger-ui",) if path == "/api/docs/" else ())
        if violations:
            found[path] = violations
    return found


def test_every_page_a_member_sees_has_no_serious_accessibility_violation(
    page,
    live_server,
    demo_pool,  # noqa: F811
):
    job = Job.objects.get(name="notebook-idle")  # Bob's running job, with GPU readings
    log_in(page.page, live_server, "bob", next_url="/")
    paths = member_pages(job, demo_pool.name)
    assert scan(page, live_server, paths) == {}


def test_every_page_a_platform_admin_sees_has_no_serious_accessibility_violation(
    page,
    live_server,
    demo_pool,  # noqa: F811
):
    log_in(page.page, live_server, "root", next_url="/")
    paths = [
        "/",
        "/queue/",
        "/quotas/",
        "/pool/clusters/",
        "/clusters/",
        *[f"/clusters/{c.name}/" for c in Cluster.objects.all()],
        f"/clusters/{demo_pool.name}/test/",
        f"/clusters/{demo_pool.name}/state/draining/",
        f"/clusters/{demo_pool.name}/state/disabled/",
        f"/clusters/{demo_pool.name}/delete/",
        "/clusters/register/",
        "/fair-share/",
        "/jobs/new/",
        "/catalog/",
        *[f"/catalog/{m.key}/" for m in GpuModel.objects.filter(key="a100-80gb")],
        *[f"/catalog/{m.key}/share/" for m in GpuModel.objects.filter(key="a100-80gb")],
        "/policies/",
        *[f"/policies/{t.slug}/" for t in Team.objects.order_by("pk")[:1]],
    ]
    found = scan(page, live_server, paths)
    # the register form after a failed save, with its error summary
    p = page.page
    p.goto(f"{live_server.url}/clusters/register/")
    p.get_by_role("button", name="Register").click()
    p.wait_for_selector("#error-summary")
    if violations := axe_violations(p):
        found["/clusters/register/ (errors)"] = violations
    assert found == {}


def test_a_phone_with_the_menu_open_has_no_serious_accessibility_violation(
    browser,
    live_server,
    demo_pool,  # noqa: F811
):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    p = context.new_page()
    log_in(p, live_server, "bob", next_url="/jobs/")
    found = {}
    for path in ("/", "/jobs/", "/queue/", "/quotas/", "/usage/?scope=vision"):
        p.goto(f"{live_server.url}{path}")
        p.wait_for_load_state("networkidle")
        p.get_by_role("button", name="Menu").click()
        if violations := axe_violations(p):
            found[path] = violations
    context.close()
    assert found == {}


def test_the_sign_in_and_unlock_pages_have_no_serious_accessibility_violation(page, live_server):
    assert scan(page, live_server, ["/login/", "/login/unlock/"]) == {}
