"""A phone (390×844) and a keyboard: the nav folds behind a real menu button, the page's own
content starts in the first screen, stacked tables name each cell's column, and the focus ring
can be seen on white."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from portal.models import JobState
from tests.browser.conftest import PageRecorder, log_in
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True}


def _contrast(p: Any, colour_a: str, colour_b: str) -> float:
    """WCAG contrast ratio of two CSS colours, computed by the page itself."""
    return p.evaluate(
        """([a, b]) => {
          const rgb = c => { const el = document.createElement('i'); el.style.color = c;
            document.body.appendChild(el); const v = getComputedStyle(el).color; el.remove();
            return v.match(/[\\d.]+/g).slice(0, 3).map(Number); };
          const lum = c => { const [r, g, b] = rgb(c).map(v => { v /= 255;
            return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
          const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
          return (hi + 0.05) / (lo + 0.05);
        }""",
        [colour_a, colour_b],
    )


def test_on_a_phone_the_nav_folds_behind_a_menu_button(browser, live_server, bob, vision, tmp_path):
    shots = Path(os.environ.get("GPUPOOL_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    JobFactory(owner=bob, team=vision, name="phone-job", state=JobState.QUEUED)
    JobFactory(owner=bob, team=vision, name="phone-job-2", state=JobState.RUNNING)
    context = browser.new_context(**PHONE)
    phone = PageRecorder(context.new_page())
    p = phone.page
    log_in(p, live_server, "bob", next_url="/jobs/")
    button = p.get_by_role("button", name="Menu")
    nav = p.locator("#main-nav")
    assert button.is_visible() and not nav.is_visible()
    assert button.get_attribute("aria-expanded") == "false"
    assert button.get_attribute("aria-controls") == "main-nav"
    # the page's own content starts in the first screen, its heading readable without scrolling
    heading = p.locator("main h1").bounding_box()
    assert heading is not None and heading["y"] + heading["height"] < 844 / 2, heading
    # open by keyboard: the first link takes focus; Escape closes and gives focus back
    button.focus()
    p.keyboard.press("Enter")
    assert nav.is_visible() and button.get_attribute("aria-expanded") == "true"
    assert p.evaluate("document.activeElement.textContent") == "Pool"
    p.screenshot(path=str(shots / "menu-phone.png"))
    p.get_by_role("link", name="Queue").click()
    p.wait_for_url(f"{live_server.url}/queue/")
    assert not p.locator("#main-nav").is_visible()  # a new page starts folded
    button = p.get_by_role("button", name="Menu")
    button.click()
    p.keyboard.press("Escape")
    assert not nav.is_visible() and button.get_attribute("aria-expanded") == "false"
    assert p.evaluate("document.activeElement.dataset.menuToggle !== undefined")
    # stacked tables print each cell's column before it
    p.goto(f"{live_server.url}/jobs/")
    state_cell = p.locator("table.jobs tbody tr").first.locator("td").nth(3)
    before = state_cell.evaluate("td => getComputedStyle(td, '::before').content")
    assert before == '"State: "', before
    p.screenshot(path=str(shots / "jobs-phone.png"))
    assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert phone.console_errors == [] and phone.foreign_requests() == []
    context.close()


def test_without_javascript_a_phone_shows_every_link(browser, live_server, bob):
    context = browser.new_context(**PHONE, java_script_enabled=False)
    p = context.new_page()
    log_in(p, live_server, "bob", next_url="/jobs/")
    assert p.locator("#main-nav").is_visible()
    assert p.get_by_role("link", name="Submit", exact=True).is_visible()
    assert not p.locator("[data-menu-toggle]").is_visible()
    context.close()


def test_on_a_desktop_the_nav_shows_and_the_focus_ring_stands_out(page, live_server, bob):
    p = page.page
    log_in(p, live_server, "bob", next_url="/jobs/")
    assert p.locator("#main-nav").is_visible()
    assert not p.locator("[data-menu-toggle]").is_visible()
    link = p.locator("main a").first
    link.focus()
    ring = link.evaluate(
        "a => { const s = getComputedStyle(a); return {outline: s.outlineColor,"
        " style: s.outlineStyle, shadow: s.boxShadow}; }"
    )
    assert ring["style"] == "solid"
    shadow_colour = ring["shadow"].split(")")[0] + ")"
    # the ring's outer band against the white card and the page, its inner band in the header
    assert _contrast(p, shadow_colour, "#ffffff") >= 3, ring
    assert _contrast(p, shadow_colour, "#f6f7f9") >= 3, ring
    assert _contrast(p, ring["outline"], "#14213d") >= 3, ring
    assert page.console_errors == []
