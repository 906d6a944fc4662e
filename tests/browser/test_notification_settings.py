"""The notification settings and a team's webhooks in a real browser, under the CSP: choose
what comes by email, see it kept; add a webhook and copy its secret, shown once."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from notifications.models import Preference, TeamWebhook
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_choose_email_events_and_add_a_team_webhook(page, live_server, alice, vision):
    p = page.page
    log_in(p, live_server, "alice", next_url="/notifications/")
    p.click("text=Settings: what also comes by email")
    p.wait_for_url(f"{live_server.url}/settings/notifications/")
    expect(p.locator("#ev-job\\.failed")).to_be_checked()
    expect(p.locator("#ev-job\\.running")).not_to_be_checked()

    p.uncheck("#ev-job\\.failed")
    p.check("#ev-job\\.running")
    p.fill("#wait-threshold", "45")
    p.click("#notification-settings button[type=submit]")
    expect(p.locator(".messages")).to_contain_text("Notification settings saved.")
    expect(p.locator("#ev-job\\.running")).to_be_checked()
    expect(p.locator("#ev-job\\.failed")).not_to_be_checked()
    expect(p.locator("#wait-threshold")).to_have_value("45")
    prefs = Preference.objects.get(user=alice)
    assert prefs.events["job.running"] == ["email"] and prefs.events["job.failed"] == []

    p.click("text=Webhooks of Vision")
    p.fill("#wh-name", "ci")
    p.fill("#wh-url", "https://203.0.113.5/gpupool")
    p.select_option("#wh-format", "slack")
    p.click("#webhook-form button[type=submit]")
    secret = p.locator("#new-secret").inner_text()
    assert len(secret) >= 40
    expect(p.locator("#webhooks")).to_contain_text("https://203.0.113.5/gpupool")
    hook = TeamWebhook.objects.get(team=vision)
    assert hook.format == "slack" and secret not in hook.secret

    p.goto(f"{live_server.url}/teams/vision/webhooks/")  # the secret is not shown again
    expect(p.locator(".error-summary")).to_have_count(0)
    expect(p.locator("#new-secret")).to_have_count(0)
    expect(p.locator("#webhooks")).to_contain_text("…" + secret[-4:])
    assert TeamWebhook.objects.count() == 1
