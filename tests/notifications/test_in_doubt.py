"""Deliveries in doubt, without killing a worker: a claim that is never recorded is what a
worker killed mid-send leaves behind. The sweep sends such a delivery again under its one
idempotency id (a webhook while it has tries, an e-mail once) and a worker that only outlived
its lease cannot record over the retry's claim. ``test_killed_worker.py`` does the same with
real kills."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from notifications.channels import message_id
from notifications.models import Delivery, DeliveryError
from notifications.outbox import (
    deliveries_in_doubt_resolve,
    delivery_claim,
    delivery_send,
    fan_out,
)
from notifications.preferences import preferences_set
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState, Notification
from tests.factories import JobFactory


def _fail(job: Any) -> None:
    assert job_transition(
        job_id=job.pk, expected=JobState.RUNNING, to=JobState.FAILED, reason="OOMKilled"
    )


def _die_mid_send(pk: int) -> dt.datetime:
    """Claim the delivery as a worker does and never record it; returns a time past the
    claim's lease (when the sweep takes it as in doubt)."""
    due = Delivery.objects.get(pk=pk).next_attempt_at  # the sweeps here run ahead of the clock
    claimed = delivery_claim(pk, now=max(timezone.now(), due))
    assert claimed is not None and claimed.lease_until is not None
    return claimed.lease_until + dt.timedelta(seconds=1)


@pytest.fixture
def webhook_delivery(alice, bob, vision, receiver, django_capture_on_commit_callbacks) -> Delivery:
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    preferences_set(user=bob, data={"events": {"job.failed": []}})
    with django_capture_on_commit_callbacks(execute=True):
        _fail(JobFactory(team=vision, owner=bob, name="bert", state=JobState.RUNNING))
    [delivery] = Delivery.objects.all()
    return delivery


@pytest.mark.django_db
def test_a_webhook_in_doubt_is_sent_again_while_it_has_tries_then_given_up(
    webhook_delivery, receiver, settings
):
    assert settings.GPUPOOL_NOTIFY_MAX_ATTEMPTS == 3
    pk = webhook_delivery.pk
    for tries in (1, 2):
        again, given_up = deliveries_in_doubt_resolve(now=_die_mid_send(pk))
        assert (again, given_up) == ([pk], 0)
        row = Delivery.objects.get(pk=pk)
        assert (row.state, row.attempts, row.retries_in_doubt) == ("pending", tries, tries)
        assert row.error == DeliveryError.WORKER_STOPPED and row.retried_after_interruption
    # The third try dies too: no try is left, it is given up as in doubt.
    assert deliveries_in_doubt_resolve(now=_die_mid_send(pk)) == ([], 1)
    row = Delivery.objects.get(pk=pk)
    assert (row.state, row.attempts, row.retries_in_doubt) == ("unknown", 3, 2)
    assert row.error == DeliveryError.IN_DOUBT and "no retry is left" in row.last_error
    assert delivery_send(pk) is None  # never sent again
    assert receiver.received == []


@pytest.mark.django_db
def test_a_webhook_retried_in_doubt_carries_the_key_of_its_first_try(webhook_delivery, receiver):
    pk = webhook_delivery.pk
    past = _die_mid_send(pk)
    deliveries_in_doubt_resolve(now=past)
    assert delivery_send(pk, now=past) == "sent"
    [got] = receiver.wait_for(1)
    key = str(webhook_delivery.key)
    assert got.verified
    assert got.headers["Idempotency-Key"] == key and got.json()["idempotency_key"] == key
    assert got.headers["X-Gpupool-Delivery"] == str(pk) and got.json()["delivery"] == pk
    row = Delivery.objects.get(pk=pk)
    assert (row.state, row.attempts, row.retries_in_doubt) == ("sent", 2, 1)


@pytest.mark.django_db
def test_an_email_in_doubt_is_sent_again_once_with_one_message_id(
    bob, vision, smtp_server, django_capture_on_commit_callbacks
):
    bob.email = "bob@example.org"
    bob.save()
    with django_capture_on_commit_callbacks(execute=True):
        _fail(JobFactory(team=vision, owner=bob, name="sent", state=JobState.RUNNING))
        _fail(JobFactory(team=vision, owner=bob, name="lost", state=JobState.RUNNING))
    sent, lost = Delivery.objects.order_by("pk")
    assert (sent.channel, lost.channel) == ("email", "email")

    past = _die_mid_send(sent.pk)
    assert deliveries_in_doubt_resolve(now=past) == ([sent.pk], 0)
    assert delivery_send(sent.pk, now=past) == "sent"
    [mail] = smtp_server.wait_for(1)
    assert mail["Message-ID"] == message_id(sent) and str(sent.key) in mail["Message-ID"]

    # Once only: a retry in doubt as well is not sent a third time.
    assert deliveries_in_doubt_resolve(now=_die_mid_send(lost.pk)) == ([lost.pk], 0)
    assert deliveries_in_doubt_resolve(now=_die_mid_send(lost.pk)) == ([], 1)
    lost.refresh_from_db()
    assert (lost.state, lost.attempts, lost.retries_in_doubt, lost.error) == (
        "unknown",
        2,
        1,
        DeliveryError.IN_DOUBT,
    )
    assert len(smtp_server.messages) == 1


@pytest.mark.django_db
def test_every_delivery_has_its_own_key(alice, bob, vision, receiver, smtp_server):
    bob.email = "bob@example.org"
    bob.save()
    webhook_create(team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"])
    for name in ("a", "b"):
        _fail(JobFactory(team=vision, owner=bob, name=name, state=JobState.RUNNING))
    fan_out(Notification.objects.values_list("pk", flat=True))
    keys = list(Delivery.objects.values_list("key", flat=True))
    assert len(keys) == 4 and len(set(keys)) == 4


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_outlived_its_lease_does_not_record_over_the_retry(
    webhook_delivery, receiver
):
    """The slow worker's send is in doubt once its lease passes; the sweep gives it to a
    retry, which claims it. The slow worker's late "sent" must not end that claim: the
    retry's own outcome is the one recorded."""
    pk = webhook_delivery.pk
    receiver.hold = threading.Event()
    outcome: list[str | None] = []

    def send_late() -> None:
        try:
            outcome.append(delivery_send(pk))
        finally:
            connection.close()  # the thread's own connection

    slow = threading.Thread(target=send_late, daemon=True)
    slow.start()
    try:
        assert receiver.arrived.wait(15)
        first = Delivery.objects.get(pk=pk)
        assert first.state == "sending" and first.lease_until is not None
        past = first.lease_until + dt.timedelta(seconds=1)
        assert deliveries_in_doubt_resolve(now=past) == ([pk], 0)
        retry = delivery_claim(pk, now=past)
        assert retry is not None and retry.lease_until != first.lease_until
    finally:
        receiver.hold.set()
    slow.join(15)
    assert outcome == [None]  # not recorded: no longer its claim
    row = Delivery.objects.get(pk=pk)
    assert (row.state, row.lease_until, row.attempts) == ("sending", retry.lease_until, 1)


@pytest.mark.django_db
def test_a_slack_message_in_doubt_is_sent_again_once_slack_reads_no_key(
    alice, bob, vision, receiver, django_capture_on_commit_callbacks
):
    webhook_create(
        team=vision, by=alice, name="chat", url=receiver.url, format="slack", events=["job.failed"]
    )
    preferences_set(user=bob, data={"events": {"job.failed": []}})
    with django_capture_on_commit_callbacks(execute=True):
        _fail(JobFactory(team=vision, owner=bob, name="bert", state=JobState.RUNNING))
    [delivery] = Delivery.objects.all()
    assert delivery.channel == "slack"
    assert deliveries_in_doubt_resolve(now=_die_mid_send(delivery.pk)) == ([delivery.pk], 0)
    assert deliveries_in_doubt_resolve(now=_die_mid_send(delivery.pk)) == ([], 1)
    delivery.refresh_from_db()
    assert (delivery.state, delivery.retries_in_doubt) == ("unknown", 1)
