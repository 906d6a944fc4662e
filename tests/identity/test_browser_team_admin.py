"""A team admin manages their team's members in Chromium, under the CSP: add someone, change
their role, remove them; a group-made membership shows where it came from and no controls."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from identity.models import ProviderMembership
from portal.models import Membership, Role
from tests.browser.conftest import browser, log_in, page  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_team_admin_manages_members(page, live_server, alice, bob, charlie, vision):  # noqa: F811
    mark = Membership.objects.get(user=bob, team=vision)
    ProviderMembership.objects.create(membership=mark, provider="ldap", groups=["gpu-vision-x"])
    p = page.page
    log_in(p, live_server, "alice")
    p.click("#main-nav >> text=My teams")
    p.click("text=Vision")
    p.wait_for_url(f"{live_server.url}/teams/vision/members/")
    expect(p.locator("tr[data-member=bob]")).to_contain_text("from ldap group gpu-vision-x")
    expect(p.locator("tr[data-member=bob] button")).to_have_count(0)

    p.fill("#add-username", "charlie")
    p.select_option("#add-role", "viewer")
    p.click("button.primary:has-text('Add')")
    expect(p.locator("tr[data-member=charlie]")).to_contain_text("Viewer")
    row = p.locator("tr[data-member=charlie]")
    row.locator("select").select_option("member")
    row.locator("text=Change role").click()
    expect(p.locator("tr[data-member=charlie]")).to_contain_text("Member")
    assert Membership.objects.get(user=charlie, team=vision).role == Role.MEMBER
    p.locator("tr[data-member=charlie] >> text=Remove").click()
    expect(p.locator("tr[data-member=charlie]")).to_have_count(0)
    expect(p.locator(".audit")).to_contain_text("member-removed charlie")
