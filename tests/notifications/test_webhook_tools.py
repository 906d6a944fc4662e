"""A team admin's tools for a webhook: *Send test* (signed like every delivery, in the
webhook's format, answered on the page in words) and *Redeliver* a delivery of the team's
log (the same idempotency key). Against a real receiver on 127.0.0.1, or nothing listening;
another team's webhook or delivery is a 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from notifications.models import Delivery
from notifications.outbox import delivery_send, fan_out
from notifications.webhooks import webhook_create
from portal.models import Notification, TeamChange
from tests.factories import JobFactory
from tests.ports import free_port

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _failed_delivery(owner: Any, team: Any) -> Delivery:
    job = JobFactory(team=team, owner=owner, name="resnet")
    note = Notification.objects.create(
        user=owner,
        job=job,
        kind="job.failed",
        title="resnet failed (OOMKilled)",
        created_at=timezone.now(),
    )
    [pk] = [d for d in fan_out([note.pk]) if Delivery.objects.get(pk=d).channel != "email"]
    return Delivery.objects.get(pk=pk)


def test_send_test_arrives_signed_and_the_page_says_so(alice, vision, receiver):
    hook, receiver.secret = webhook_create(team=vision, by=alice, name="ci", url=receiver.url)
    page = _client(alice).post(f"/teams/vision/webhooks/{hook.pk}/test/", follow=True)
    assert "The test arrived: the receiver answered 200." in page.content.decode()
    [got] = receiver.wait_for(1)
    assert got.verified and got.json()["type"] == "webhook.test"
    assert got.json()["title"] == "Test from gpupool" and got.json()["job"] is None
    assert TeamChange.objects.filter(team=vision, action="tested", subject="ci").exists()


def test_send_test_to_a_slack_webhook_has_slacks_body(alice, vision, receiver):
    hook, receiver.secret = webhook_create(
        team=vision, by=alice, name="chat", url=receiver.url, format="slack"
    )
    _client(alice).post(f"/teams/vision/webhooks/{hook.pk}/test/")
    [got] = receiver.wait_for(1)
    assert set(got.json()) == {"text"} and got.json()["text"].startswith("*Test from gpupool*")


def test_a_failed_test_says_why_in_words(alice, vision):
    hook, _ = webhook_create(
        team=vision, by=alice, name="closed", url=f"http://127.0.0.1:{free_port()}/hook"
    )
    page = _client(alice).post(f"/teams/vision/webhooks/{hook.pk}/test/", follow=True)
    assert "The test failed: connection refused." in page.content.decode()


def test_redeliver_a_failed_delivery_sends_it_again_under_its_key(alice, vision, receiver):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    delivery = _failed_delivery(alice, vision)
    receiver.statuses = [404]  # gone: not retried by the outbox
    assert delivery_send(delivery.pk) == "failed"
    page = _client(alice).get("/teams/vision/webhooks/").content.decode()
    assert "HTTP 404 (not found at the receiver: check the URL)" in page
    assert "Redeliver" in page

    page = _client(alice).post(
        f"/teams/vision/webhooks/deliveries/{delivery.pk}/redeliver/", follow=True
    )
    assert "The redelivery arrived: the receiver answered with a 2xx." in page.content.decode()
    first, again = receiver.wait_for(2)
    assert again.verified and again.headers["Idempotency-Key"] == str(delivery.key)
    assert first.headers["Idempotency-Key"] == str(delivery.key)
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("sent", 2, "")


def test_a_pending_delivery_is_not_redelivered(alice, vision, receiver):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    delivery = _failed_delivery(alice, vision)
    page = _client(alice).post(
        f"/teams/vision/webhooks/deliveries/{delivery.pk}/redeliver/", follow=True
    )
    assert "on its way already" in page.content.decode()
    assert receiver.received == []


def test_another_teams_admin_can_neither_test_nor_redeliver(
    alice, vision, charlie, language, receiver
):
    hook, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    delivery = _failed_delivery(alice, vision)
    receiver.statuses = [404]
    delivery_send(delivery.pk)
    as_charlie = _client(charlie)
    # Charlie's own team in the URL, Vision's ids: not found.
    assert as_charlie.post(f"/teams/language/webhooks/{hook.pk}/test/").status_code == 404
    assert (
        as_charlie.post(f"/teams/language/webhooks/deliveries/{delivery.pk}/redeliver/").status_code
        == 404
    )
    assert as_charlie.post(f"/teams/vision/webhooks/{hook.pk}/test/").status_code == 404
    assert len(receiver.received) == 1  # only the first, failed try
    assert "resnet" not in as_charlie.get("/teams/language/webhooks/").content.decode()


def test_the_form_keeps_format_and_events_after_an_error_and_shows_events_in_words(alice, vision):
    page = _client(alice).post(
        "/teams/vision/webhooks/",
        {"name": "chat", "url": "ftp://nowhere", "format": "slack", "events": ["job.running"]},
    )
    assert page.status_code == 400
    html = page.content.decode()
    assert '<option value="slack" selected>' in html
    assert 'value="job.running" checked' in html and 'value="job.failed" checked' not in html
    assert "A team job started" in html
