"""Demo mode: the login page names the demo users and their password, and only in demo mode."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from portal.demo import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


def test_the_login_page_names_the_demo_users_in_demo_mode(client, settings):
    settings.GPUPOOL_DEMO = True
    page = client.get("/login/").content.decode()
    assert "data-demo-banner" in page
    assert DEMO_PASSWORD in page
    for line in ("<code>admin</code>: platform admin", "<code>alice</code>: team admin of Vision"):
        assert line in page


def test_a_portal_outside_demo_mode_shows_no_password(client, settings):
    settings.GPUPOOL_DEMO = False
    page = client.get("/login/").content.decode()
    assert "data-demo-banner" not in page
    assert DEMO_PASSWORD not in page


def test_seed_demo_prints_each_user_with_the_password_and_role():
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    text = out.getvalue()
    assert f"bob      / {DEMO_PASSWORD}   (member of Vision, member of Language)" in text
    assert f"viewer   / {DEMO_PASSWORD}   (viewer (read-only) of Vision)" in text
