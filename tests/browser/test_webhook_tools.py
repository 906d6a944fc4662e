"""A team admin's webhook page in a real browser, against a real receiver on 127.0.0.1: a
form sent with a bad URL keeps its format and events (in words); *Send test* arrives signed
and the page says so; a failed delivery of the log shows why in words and *Redeliver* sends
it again under its idempotency key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from notifications.models import Delivery, TeamWebhook
from notifications.outbox import delivery_send, fan_out
from portal.models import Notification
from tests.browser.conftest import log_in
from tests.browser.test_accessibility import axe_violations
from tests.factories import JobFactory
from tests.notifications.conftest import _notification_settings, receiver  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(p, name: str, *, full_page: bool = False) -> None:
    """Set ``GPUPOOL_SCREENSHOT_DIR=docs/screenshots`` to refresh the README's picture."""
    where = os.environ.get("GPUPOOL_SCREENSHOT_DIR")
    if where:
        p.set_viewport_size({"width": 1400, "height": 900})
        p.screenshot(path=str(Path(where) / name), full_page=full_page)


def test_a_team_admin_tests_a_webhook_and_redelivers_a_failed_delivery(
    page,
    live_server,
    alice,
    vision,
    receiver,  # noqa: F811
):
    p = page.page
    log_in(p, live_server, "alice", next_url="/teams/vision/webhooks/")
    p.fill("#wh-name", "chat")
    p.fill("#wh-url", "ftp://nowhere.example")
    p.select_option("#wh-format", "slack")
    p.check("input[value='job.running']")
    p.uncheck("input[value='job.succeeded']")
    p.click("#webhook-form button[type=submit]")
    expect(p.locator("#error-summary")).to_contain_text("url")
    expect(p.locator("#wh-format")).to_have_value("slack")  # kept after the error
    expect(p.locator("input[value='job.running']")).to_be_checked()
    expect(p.locator("input[value='job.succeeded']")).not_to_be_checked()
    expect(p.locator("#webhook-form")).to_contain_text("A team job started")

    p.fill("#wh-name", "ci")
    p.fill("#wh-url", receiver.url)
    p.select_option("#wh-format", "webhook")
    p.check("input[value='job.failed']")
    p.click("#webhook-form button[type=submit]")
    receiver.secret = p.locator("#new-secret").inner_text()
    row = p.locator("#webhooks tr[data-webhook='ci']")
    expect(row).to_contain_text("A team job failed")  # events in words, not codes
    expect(row).not_to_contain_text("job.failed")

    row.get_by_role("button", name="Send test").click()
    expect(p.locator(".messages")).to_contain_text("The test arrived: the receiver answered 200.")
    [test] = receiver.wait_for(1)
    assert test.verified and test.json()["type"] == "webhook.test"

    # A job of the team fails; the receiver says 404 (gone): no retry by the outbox.
    hook = TeamWebhook.objects.get(team=vision, name="ci")
    job = JobFactory(team=vision, owner=alice, name="resnet")
    note = Notification.objects.create(
        user=alice,
        job=job,
        kind="job.failed",
        title="resnet failed (OOMKilled)",
        created_at=timezone.now(),
    )
    fan_out([note.pk])
    delivery = Delivery.objects.get(webhook=hook)
    receiver.statuses = [404]
    assert delivery_send(delivery.pk) == "failed"

    p.reload()
    logged = p.locator(f"#webhook-deliveries tr[data-delivery='{delivery.pk}']")
    expect(logged).to_contain_text("HTTP 404 (not found at the receiver: check the URL)")
    assert axe_violations(p) == []
    _shot(p, "webhooks.png", full_page=True)
    logged.get_by_role("button", name="Redeliver resnet failed (OOMKilled) to ci").click()
    expect(p.locator(".messages")).to_contain_text("The redelivery arrived")
    expect(p.locator(f"#webhook-deliveries tr[data-delivery='{delivery.pk}']")).to_have_attribute(
        "data-state", "sent"
    )
    _, failed, again = receiver.wait_for(3)
    assert again.verified and again.headers["Idempotency-Key"] == str(delivery.key)
    assert failed.headers["Idempotency-Key"] == str(delivery.key)
