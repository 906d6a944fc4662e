"""Job events reach their owner by email through a real SMTP server, and the team's webhooks
through a real HTTP receiver that checks the signature; failures retry with backoff."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from notifications.models import Delivery, DeliveryState, TeamWebhook
from notifications.outbox import backoff_seconds, deliveries_sweep, delivery_send
from notifications.preferences import preferences_set
from notifications.signing import signature_verify
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState, Notification
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _fail(job: Any, reason: str = "OOMKilled", message: str = "replica 0 ran out of memory"):
    return job_transition(
        job_id=job.pk, expected=job.state, to=JobState.FAILED, reason=reason, message=message
    )


def _deliveries(**filters: Any) -> list[Delivery]:
    return list(Delivery.objects.filter(**filters).order_by("pk"))


def test_a_failed_job_mails_its_owner_once_with_the_reason(
    bob, vision, smtp_server, django_capture_on_commit_callbacks
):
    bob.email = "bob@example.org"
    bob.save()
    job = JobFactory(team=vision, owner=bob, name="resnet", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        assert _fail(job)
    [delivery] = _deliveries(user=bob)
    assert (delivery.channel, delivery.recipient, delivery.state) == (
        "email",
        f"user:{bob.pk}",
        "pending",
    )

    assert delivery_send(delivery.pk) == "sent"
    [mail] = smtp_server.wait_for(1)
    assert mail["To"] == "bob@example.org"
    assert mail["Subject"] == "[gpupool] resnet failed (OOMKilled)"
    assert "replica 0 ran out of memory" in mail.get_payload()
    assert f"/jobs/{job.public_id}/" in mail.get_payload()
    # A second message for the same delivery (a duplicate, the sweep) sends nothing.
    assert delivery_send(delivery.pk) is None
    deliveries_sweep()
    assert len(smtp_server.messages) == 1
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.SENT and delivery.attempts == 1 and delivery.sent_at


def test_defaults_mail_terminal_states_and_preemption_only_and_preferences_change_that(
    bob, vision, django_capture_on_commit_callbacks
):
    bob.email = "bob@example.org"  # e-mail is off without an address
    bob.save()
    job = JobFactory(team=vision, owner=bob, state=JobState.SUBMITTED)
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(
            job_id=job.pk, expected=JobState.SUBMITTED, to=JobState.RUNNING, reason="Started"
        )
    assert Notification.objects.filter(user=bob, kind="job.running").count() == 1
    assert _deliveries(user=bob) == []  # in the bell only, by default

    preferences_set(user=bob, data={"events": {"job.running": ["email"], "job.failed": []}})
    other = JobFactory(team=vision, owner=bob, state=JobState.SUBMITTED)
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(
            job_id=other.pk, expected=JobState.SUBMITTED, to=JobState.RUNNING, reason="Started"
        )
        _fail(other)
    assert [(d.notification.kind, d.channel) for d in _deliveries(user=bob)] == [
        ("job.running", "email")
    ]


def test_an_address_removed_before_the_send_fails_the_delivery_with_a_reason_the_user_reads(
    bob, vision, smtp_server, django_capture_on_commit_callbacks
):
    # Without an address no e-mail delivery is written at all (test_email_address.py); one
    # written while there was an address, sent after it was removed, fails in words.
    bob.email = "bob@example.org"
    bob.save()
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    [delivery] = _deliveries(user=bob)
    bob.email = ""
    bob.save()
    assert delivery_send(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert delivery.last_error == "your account has no email address"
    assert smtp_server.messages == []


def test_a_team_webhook_is_signed_and_a_receiver_verifies_it(
    alice, bob, vision, receiver, django_capture_on_commit_callbacks
):
    hook, secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed", "job.cancelled"]
    )
    receiver.secret = secret
    assert secret not in hook.secret  # stored sealed
    job = JobFactory(team=vision, owner=bob, name="bert", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job, reason="ImagePullBackOff", message="no such image")
    [delivery] = _deliveries(channel="webhook")
    assert delivery.recipient == f"webhook:{hook.pk}"

    assert delivery_send(delivery.pk) == "sent"
    [got] = receiver.wait_for(1)
    assert got.verified
    body = got.json()
    assert body["type"] == "job.failed"
    assert body["title"] == "bert failed (ImagePullBackOff)"
    assert body["message"] == "no such image"
    assert body["job"] == {
        "id": str(job.public_id),
        "name": "bert",
        "team": "vision",
        "state": "FAILED",
        "status": "FAILED",
    }
    assert got.headers["X-Gpupool-Delivery"] == str(delivery.pk)
    # The receiver's replay check: the same request ten minutes later is refused, and so is a
    # changed body or another secret.
    ts, sig = got.headers["X-Gpupool-Timestamp"], got.headers["X-Gpupool-Signature"]
    assert signature_verify(secret, timestamp=ts, signature=sig, body=got.body)
    assert not signature_verify(
        secret, timestamp=ts, signature=sig, body=got.body, now=int(ts) + 600
    )
    assert not signature_verify(secret, timestamp=ts, signature=sig, body=got.body + b" ")
    assert not signature_verify("another", timestamp=ts, signature=sig, body=got.body)


def test_a_slack_webhook_gets_slacks_body(
    alice, bob, vision, receiver, django_capture_on_commit_callbacks
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="chat", url=receiver.url, format="slack", events=["job.failed"]
    )
    job = JobFactory(team=vision, owner=bob, name="gpt", state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    [delivery] = _deliveries(channel="slack")
    assert delivery_send(delivery.pk) == "sent"
    [got] = receiver.wait_for(1)
    assert got.verified
    assert set(got.json()) == {"text"}
    assert got.json()["text"].startswith(
        "*gpt failed (OOMKilled)*\nreplica 0 ran out of memory\n<http"
    )


def test_a_failing_receiver_is_retried_with_backoff_then_given_up(
    alice, bob, vision, receiver, django_capture_on_commit_callbacks, settings
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    receiver.statuses = [500, 503, 500]
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    [delivery] = _deliveries(channel="webhook")
    before = timezone.now()
    assert delivery_send(delivery.pk) == "pending"
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_error) == (1, "HTTP 500 (error inside the receiver)")
    assert delivery.next_attempt_at >= before + dt.timedelta(seconds=30)
    assert delivery_send(delivery.pk) is None  # not due yet: nothing sent
    assert len(receiver.received) == 1

    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    assert delivery_send(delivery.pk) == "pending"
    delivery.refresh_from_db()
    assert delivery.next_attempt_at >= timezone.now() + dt.timedelta(seconds=55)  # 30 × 2
    assert [backoff_seconds(n) for n in (1, 2, 3)] == [30, 60, 120]

    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    assert delivery_send(delivery.pk) == "failed"  # the third and last try (MAX_ATTEMPTS = 3)
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_error) == (
        "failed",
        3,
        "HTTP 500 (error inside the receiver)",
    )
    assert len(receiver.received) == 3


def test_a_receiver_that_recovers_gets_the_message_on_the_retry(
    alice, bob, vision, receiver, django_capture_on_commit_callbacks
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    receiver.statuses = [502]
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    [delivery] = _deliveries(channel="webhook")
    assert delivery_send(delivery.pk) == "pending"
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    assert delivery_send(delivery.pk) == "sent"
    assert [r.verified for r in receiver.received] == [True, True]
    # Both tries carry the same delivery id: a receiver can drop a duplicate.
    assert {r.headers["X-Gpupool-Delivery"] for r in receiver.received} == {str(delivery.pk)}


def test_the_url_guard_is_checked_again_before_each_send(
    alice, bob, vision, receiver, settings, django_capture_on_commit_callbacks
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL = False  # e.g. the operator switched local URLs off
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        _fail(job)
    [delivery] = _deliveries(channel="webhook")
    assert delivery_send(delivery.pk) == "failed"
    delivery.refresh_from_db()
    # A category only: the guard's words (the address, why) are for the server log.
    assert (delivery.error, delivery.last_error) == ("blocked", "blocked address")
    assert receiver.received == []


def test_the_sweep_fans_out_a_notification_whose_hook_never_ran(bob, vision, smtp_server):
    """The process died between the transition's commit and the fan-out: the sweep makes the
    outbox rows, once."""
    bob.email = "bob@example.org"
    bob.save()
    job = JobFactory(team=vision, owner=bob, state=JobState.RUNNING)
    _fail(job)  # no on-commit callbacks run in this test transaction: the hook never fired
    assert _deliveries(user=bob) == []
    assert deliveries_sweep()["fanned_out"] == 1
    assert deliveries_sweep()["fanned_out"] == 0
    [delivery] = _deliveries(user=bob)
    assert delivery_send(delivery.pk) == "sent"
    assert len(smtp_server.wait_for(1)) == 1


def test_webhook_secret_is_kept_sealed_and_shown_once(alice, vision, receiver):
    hook, secret = webhook_create(team=vision, by=alice, name="ci", url=receiver.url)
    stored = TeamWebhook.objects.get(pk=hook.pk)
    assert secret not in stored.secret and stored.secret_hint == "…" + secret[-4:]
    assert len(secret) >= 40
