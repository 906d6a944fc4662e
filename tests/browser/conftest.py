"""Headless Chromium (Debian's package) driven by Playwright, against a live test server.

Playwright cannot download browsers here, so it launches ``/usr/bin/chromium`` through
``executable_path``. Every request the page makes is recorded, so tests can assert that
nothing leaves localhost; console errors are collected too.

Every Content-Security-Policy violation a page reports (its ``securitypolicyviolation``
events, and Chromium's "Refused to …" console lines) is recorded as well, and any at all fails
the test that caused it when its page is closed: no inline script, no eval, nothing from
elsewhere, on any page a browser test visits.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.dashboards.conftest import kubesim_cluster, scenario  # noqa: F401  (fixtures)

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class _SharedChromium:
    """One Playwright and one Chromium per test process, however many modules ask for the
    ``browser`` fixture: a module that imports the fixture (tests/identity does) defines a
    second session fixture, and a second sync Playwright in the same thread is refused."""

    users = 0
    playwright: Any = None
    instance: Any = None
    previous_async_unsafe: str | None = None

    @classmethod
    def acquire(cls) -> Any:
        if cls.users == 0:
            # Playwright's sync API runs an event loop in this thread; the ORM calls the test
            # makes here are synchronous and safe, so allow them.
            cls.previous_async_unsafe = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            from playwright.sync_api import sync_playwright

            cls.playwright = sync_playwright().start()
            cls.instance = cls.playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        cls.users += 1
        return cls.instance

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users:
            return
        try:
            cls.instance.close()
            cls.playwright.stop()
        finally:
            if cls.previous_async_unsafe is None:
                os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
            else:
                os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = cls.previous_async_unsafe


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"chromium not found at {CHROMIUM}; .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    instance = _SharedChromium.acquire()
    try:
        yield instance
    finally:
        _SharedChromium.release()


# Runs in every page before its own scripts (Playwright's init scripts are not subject to the
# page's CSP) and reports each violation to the test through an exposed function.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (e) {
  window.__gpupoolCspViolation({
    directive: e.effectiveDirective, blocked: e.blockedURI, source: e.sourceFile,
    line: e.lineNumber, sample: e.sample, page: document.location.href
  });
});
"""


class PageRecorder:
    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        self.csp_violations: list[Any] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.console_errors.append(str(e)))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)
        if "Content Security Policy" in message.text:
            self.csp_violations.append(message.text)

    def foreign_requests(self) -> list[str]:
        return [
            u
            for u in self.requests
            if urlparse(u).hostname not in {"localhost", "127.0.0.1", "::1"}
            and not u.startswith(("data:", "blob:", "about:"))
        ]


@pytest.fixture
def page(browser: Any) -> Iterator[PageRecorder]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    violations: list[Any] = []
    context.expose_function("__gpupoolCspViolation", lambda v: violations.append(v))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    recorder = PageRecorder(context.new_page())
    recorder.csp_violations = violations  # events and console lines in one list
    yield recorder
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


def log_in(
    page: Any,
    live_server: Any,
    username: str,
    password: str = "pw-for-tests",
    *,
    next_url: str = "/jobs/",
) -> None:
    """Log in through the form and land on ``next_url`` (the home page is the pool overview)."""
    page.goto(f"{live_server.url}/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}{next_url}")


def wait_until(page: Any, expression: str, *, timeout: float = 10.0) -> None:
    """Poll a JavaScript expression until it is true. Playwright's ``wait_for_function`` runs
    its predicate through ``new Function`` inside the page, which the page's CSP refuses (and
    reports as an eval); ``evaluate`` goes through the DevTools protocol, which it does not."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {expression}")
        page.wait_for_timeout(50)


def member_pages(job: Any, cluster: str | None = None) -> list[str]:
    """Every page a team member reaches from the nav and a job of theirs: the one list that
    the accessibility scan and the Content-Security-Policy check both walk, so a new page
    added here is held to both."""
    return [
        "/",
        "/jobs/",
        "/jobs/?scope=team",
        "/jobs/new/",
        f"/jobs/{job.public_id}/",
        f"/jobs/{job.public_id}/cancel/",
        "/queue/",
        "/quotas/",
        "/pool/clusters/",
        "/clusters/",
        *([f"/clusters/{cluster}/"] if cluster else []),
        "/fair-share/",
        "/usage/",
        "/usage/?scope=vision",
        "/templates/",
        "/templates/new/",
        "/notifications/",
        "/notifications/recent/",
        "/tokens/",
        "/api/docs/",
    ]
