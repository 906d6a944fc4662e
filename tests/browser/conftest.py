"""Headless Chromium (Debian's package) driven by Playwright, against a live test server.

Playwright cannot download browsers here, so it launches ``/usr/bin/chromium`` through
``executable_path``. Every request the page makes is recorded, so tests can assert that
nothing leaves localhost; console errors are collected too.
"""

from __future__ import annotations

import os
import shutil
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


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"chromium not found at {CHROMIUM}; .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # here are synchronous and safe, so allow them.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            instance = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield instance
            instance.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class PageRecorder:
    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.console_errors.append(str(e)))

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
    recorder = PageRecorder(context.new_page())
    yield recorder
    context.close()


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
