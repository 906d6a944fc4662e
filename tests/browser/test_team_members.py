"""A team admin in a real browser finds a known account and adds it, then invites someone by
e-mail and copies the link, which the invitee opens after signing in and joins."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from portal.models import Membership
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.factories import UserFactory
from tests.notifications.conftest import smtp_server  # noqa: F401  (a real SMTP server)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_search_add_and_invite(page, browser, live_server, alice, vision, smtp_server):  # noqa: F811
    UserFactory(username="dana", first_name="Dana", last_name="Scully")
    p = page.page
    log_in(p, live_server, "alice", next_url="/teams/vision/members/")
    p.fill("#search-q", "scul")
    p.press("#search-q", "Enter")
    result = p.locator("#search-results [data-account='dana']")
    expect(result).to_contain_text("Dana Scully")
    assert axe_violations(p) == []
    result.get_by_role("button", name="Add dana").click()
    expect(p.locator("tr[data-member='dana']")).to_contain_text("Member")

    p.fill("#invite-email", "frank@example.org")
    p.click("#invite-form button[type=submit]")
    expect(p.locator("#invited")).to_contain_text("We e-mailed an invitation to frank@example.org")
    link = p.locator("#invitation-link").inner_text()
    expect(p.locator("#invitations")).to_contain_text("frank@example.org")
    assert smtp_server.wait_for(1)

    frank = UserFactory(username="frank")
    frank.set_password("pw-for-tests")
    frank.save()
    context = browser.new_context()
    other = context.new_page()
    try:
        path = link.split(live_server.url, 1)[-1] if link.startswith(live_server.url) else link
        other.goto(f"{live_server.url}{path}" if path.startswith("/") else path)
        other.fill("#id_username", "frank")
        other.fill("#id_password", "pw-for-tests")
        other.click("button[type=submit]")
        expect(other.locator("#invitation")).to_contain_text("as member")
        other.get_by_role("button", name="Join Vision").click()
        expect(other.locator(".messages")).to_contain_text("You are in team Vision.")
    finally:
        context.close()
    assert Membership.objects.filter(team=vision, user=frank).exists()
