"""A user sets their own e-mail address in the browser and proves it with the link mailed to
it by a real SMTP server (aiosmtpd, in the test): until then e-mail is off, and says so."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from notifications.models import EmailVerification
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.notifications.conftest import _notification_settings, smtp_server  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_user_sets_their_address_and_confirms_it_with_the_mailed_link(
    page,
    live_server,
    bob,
    smtp_server,  # noqa: F811
):
    assert bob.email == ""
    p = page.page
    log_in(p, live_server, "bob", next_url="/settings/notifications/")
    expect(p.locator("#email-off")).to_contain_text("E-mail is off")
    # a typo is refused, next to the field, and nothing is mailed
    p.fill("#id_email", "bob-at-example.org")
    p.click("#email-form button.primary")
    expect(p.locator("#id_email_error")).to_contain_text("Enter an e-mail address")
    expect(p.locator("#id_email")).to_have_value("bob-at-example.org")
    assert axe_violations(p) == []
    assert smtp_server.messages == [] and not EmailVerification.objects.exists()

    p.fill("#id_email", "bob@example.org")
    p.click("#email-form button.primary")
    expect(p.locator(".messages")).to_contain_text("We sent a link to bob@example.org")
    expect(p.locator("#email-pending")).to_contain_text("bob@example.org")
    expect(p.locator("#email-off")).to_be_visible()  # not in use before the link is opened
    [mail] = smtp_server.wait_for(1)
    assert mail["To"] == "bob@example.org"
    assert mail["Subject"] == "[gpupool] Confirm your e-mail address"
    bob.refresh_from_db()
    assert bob.email == ""
    link = re.search(r"http://\S+/verify/\S+/", mail.get_payload()).group(0)
    assert link.startswith(live_server.url)

    p.goto(link)
    expect(p.locator(".messages")).to_contain_text("E-mail address bob@example.org confirmed.")
    expect(p.locator("#email-address")).to_contain_text("E-mail goes to bob@example.org")
    expect(p.locator("#email-off")).to_have_count(0)
    expect(p.locator("#email-pending")).to_have_count(0)
    bob.refresh_from_db()
    assert bob.email == "bob@example.org"
    # the link works once
    p.goto(link)
    expect(p.locator(".messages .error")).to_contain_text("not valid")
    # the only "error" in the console is Chromium noting the refused address's 400
    assert [e for e in page.console_errors if "status of 400" not in e] == []
    assert page.foreign_requests() == []
