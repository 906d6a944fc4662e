"""The whole OpenID Connect round trip in Chromium: the login page's button, the provider's
own sign-in form, back to the portal signed in with the team from the groups, then logout
through the provider's end-session page back to the portal's login page; no CSP violation."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from playwright.sync_api import expect

from config.settings import csp_with_providers
from identity.models import GroupRule
from portal.models import Membership, Role
from tests.browser.conftest import browser, page  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_with_the_provider_and_out_again(
    page,  # noqa: F811
    live_server,
    oidc_settings,
    settings,
    vision,
):
    settings.CONTENT_SECURITY_POLICY = csp_with_providers(
        django_settings.CONTENT_SECURITY_POLICY, settings.GPUPOOL_OIDC_PROVIDERS
    )
    GroupRule.objects.create(pattern="gpu-vision-admins", team=vision, role="admin")
    oidc_settings.set_user("yara", groups=["gpu-vision-admins"], password="yara-idp-pw")
    p = page.page
    p.goto(f"{live_server.url}/login/?next=/jobs/")
    p.click("text=Sign in with Test IdP")
    p.wait_for_url(f"{oidc_settings.issuer}/interaction/**")
    p.fill("#login", "yara")
    p.fill("#password", "wrong")
    p.click("text=Sign in at the provider")
    expect(p.locator("[role=alert]")).to_contain_text("Wrong username or password")
    p.fill("#login", "yara")
    p.fill("#password", "yara-idp-pw")
    p.click("text=Sign in at the provider")
    p.wait_for_url(f"{live_server.url}/jobs/")
    expect(p.locator("form.logout span")).to_have_text("yara")
    assert Membership.objects.get(user__username="yara", team=vision).role == Role.ADMIN
    expect(p.locator("#main-nav")).to_contain_text("My teams")

    p.click("form.logout button")
    p.wait_for_url(f"{oidc_settings.issuer}/session/end**")
    p.click("text=Yes, sign me out")
    p.wait_for_url(f"{live_server.url}/login/?state=**")  # the provider hands back our state
    p.goto(f"{live_server.url}/jobs/")
    p.wait_for_url(f"{live_server.url}/login/?next=/jobs/")
