"""A Celery worker killed in the middle of a send leaves it in doubt (it may have arrived):
the sweep sends it again under the same idempotency id, a webhook with the same
``Idempotency-Key``, an e-mail once with the same ``Message-ID``, and the owner's delivery log
says it was retried after an interrupted send."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from notifications.channels import message_id
from notifications.models import Delivery, DeliveryError, DeliveryState
from notifications.outbox import deliveries_enqueue, deliveries_sweep
from notifications.preferences import preferences_set
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState
from tests.clusters.conftest import (
    WorkerProcess,
    _database_url,
    _drop_queue,
    _test_broker,
    app_publishing_to,
    worker_start,
)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 3


def _fail(job: Any) -> None:
    assert job_transition(
        job_id=job.pk, expected=JobState.RUNNING, to=JobState.FAILED, reason="OOMKilled"
    )


@contextmanager
def _workers(tmp_path: Path, env: dict[str, str]) -> Iterator[Callable[[], WorkerProcess]]:
    """``start()`` → a new notifications worker on a queue of this test (this process
    publishes there meanwhile); every worker started is stopped on the way out."""
    broker, xdist = _test_broker()
    queue = f"gpupool-notify-{xdist}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    workers: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        worker = worker_start(
            queue=queue,
            broker=broker,
            database_url=_database_url(),
            log_path=tmp_path / f"worker-{len(workers)}.log",
            extra_env={"GPUPOOL_NOTIFY_LEASE_SECONDS": str(LEASE_SECONDS), **env},
        )
        workers.append(worker)
        return worker

    try:
        with app_publishing_to(broker, queue, tasks="notifications"):
            yield start
    finally:
        for worker in workers:
            worker.stop()
        _drop_queue(broker, queue)


def _sweep_after_the_lease() -> dict[str, int]:
    time.sleep(LEASE_SECONDS + 0.5)
    return deliveries_sweep()


def _settled(pk: int, timeout: float = 30.0) -> Delivery:
    """The delivery once no worker holds it (sent, failed, unknown)."""
    deadline = time.monotonic() + timeout
    delivery = Delivery.objects.get(pk=pk)
    while delivery.state in (DeliveryState.PENDING, DeliveryState.SENDING):
        assert time.monotonic() < deadline, f"delivery still {delivery.state}"
        time.sleep(0.1)
        delivery.refresh_from_db()
    return delivery


def test_a_webhook_in_doubt_after_a_kill_is_sent_again_with_the_same_idempotency_key(
    alice, bob, vision, receiver, tmp_path, api_as
):
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    # The webhook is the only delivery: bob's default mail for a failed job would be sent by
    # the worker's other process, and the kill could catch that one mid-send too.
    preferences_set(user=bob, data={"events": {"job.failed": []}})
    receiver.hold = threading.Event()
    env = {"GPUPOOL_WEBHOOK_ALLOW_LOCAL": "true", "GPUPOOL_WEBHOOK_ALLOW_HTTP": "true"}
    with _workers(tmp_path, env) as start:
        first = start()
        job = JobFactory(team=vision, owner=bob, name="killed", state=JobState.RUNNING)
        _fail(job)  # commits: the hook fans out and enqueues the send
        assert receiver.arrived.wait(30), first.output()[-3000:]
        [delivery] = Delivery.objects.all()
        assert delivery.state == DeliveryState.SENDING

        first.kill()  # SIGKILL while the receiver has the request and has not answered
        receiver.hold.set()
        receiver.hold = None

        second = start()
        swept = _sweep_after_the_lease()
        received = receiver.wait_for(2, timeout=30)
        assert len(received) == 2, second.output()[-3000:]
        assert (swept.get("retried_in_doubt"), swept["abandoned"]) == (1, 0)
        delivery = _settled(delivery.pk)

        # Both tries carry the delivery's one key, in the header and in the signed body: the
        # receiver processes the retry as the request it may already have.
        key = str(delivery.key)
        assert [r.headers["Idempotency-Key"] for r in received] == [key, key]
        assert [r.json()["idempotency_key"] for r in received] == [key, key]
        assert {r.headers["X-Gpupool-Delivery"] for r in received} == {str(delivery.pk)}
        assert all(r.verified for r in received)
        assert [r.json()["job"]["name"] for r in received] == ["killed", "killed"]
        assert (delivery.state, delivery.attempts, delivery.retries_in_doubt) == (
            DeliveryState.SENT,
            2,
            1,
        )
        assert delivery.error == DeliveryError.WORKER_STOPPED
        assert "sent again with the same id" in delivery.last_error

        # A duplicate message for it (a restored broker, an operator's retry) sends nothing
        # more, while the same worker delivers new events.
        deliveries_enqueue([delivery.pk])
        _fail(JobFactory(team=vision, owner=bob, name="next", state=JobState.RUNNING))
        received = receiver.wait_for(3, timeout=30)
        time.sleep(1.0)
        assert [r.json()["job"]["name"] for r in receiver.received] == ["killed"] * 2 + ["next"]
        assert receiver.received[2].headers["Idempotency-Key"] not in ("", key)

    # The delivery log, over REST and on the settings page, says which one was sent again.
    rows = api_as(bob).get("/api/v1/notification-deliveries/").json()["results"]
    by_key = {row["idempotency_key"]: row for row in rows}
    assert by_key[key]["retried_after_interruption"] is True
    assert by_key[key]["retries_in_doubt"] == 1
    assert by_key[key]["state"] == "sent"
    [other] = [row for k, row in by_key.items() if k != key]
    assert (other["retried_after_interruption"], other["retries_in_doubt"]) == (False, 0)
    client = Client()
    client.force_login(bob)
    page = client.get("/settings/notifications/").content.decode()
    assert page.count("retried after an interrupted send") == 1
    assert 'data-retried-in-doubt="1"' in page


def _mail_env(smtp_port: int) -> dict[str, str]:
    return {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(smtp_port)}


def test_an_email_in_doubt_after_a_kill_is_sent_again_with_the_same_message_id(
    bob, vision, smtp_server, tmp_path, api_as
):
    bob.email = "bob@example.org"
    bob.save()
    held = smtp_server.hold()
    with _workers(tmp_path, _mail_env(smtp_server.port)) as start:
        first = start()
        _fail(JobFactory(team=vision, owner=bob, name="killed", state=JobState.RUNNING))
        # The server has the whole message and has not confirmed it when the worker dies.
        assert smtp_server.arrived.wait(30), first.output()[-3000:]
        [delivery] = Delivery.objects.all()
        assert delivery.state == DeliveryState.SENDING
        first.kill()
        smtp_server.release()
        assert held.is_set()

        second = start()
        swept = _sweep_after_the_lease()
        mails = smtp_server.wait_for(2, timeout=30)
        assert len(mails) == 2, second.output()[-3000:]
        assert swept.get("retried_in_doubt") == 1
        delivery = _settled(delivery.pk)

    # One Message-ID on both copies, the delivery's: a mail client folds the second.
    assert [m["Message-ID"] for m in mails] == [message_id(delivery)] * 2
    assert message_id(delivery) == f"<{delivery.key}@{urlsplit(settings.SITE_URL).hostname}>"
    assert [m["Subject"] for m in mails] == ["[gpupool] killed failed (OOMKilled)"] * 2
    assert (delivery.state, delivery.attempts, delivery.retries_in_doubt) == (
        DeliveryState.SENT,
        2,
        1,
    )
    [row] = api_as(bob).get("/api/v1/notification-deliveries/").json()["results"]
    assert (row["channel"], row["state"], row["retried_after_interruption"]) == (
        "email",
        "sent",
        True,
    )
    assert row["idempotency_key"] == str(delivery.key)


def test_an_email_in_doubt_twice_is_not_sent_a_third_time(bob, vision, smtp_server, tmp_path):
    """Retried once, not more: a mail client can only fold copies in its view, so a send that
    kills its worker every time must not fill the inbox."""
    bob.email = "bob@example.org"
    bob.save()
    smtp_server.hold()
    with _workers(tmp_path, _mail_env(smtp_server.port)) as start:
        first = start()
        _fail(JobFactory(team=vision, owner=bob, name="killed", state=JobState.RUNNING))
        assert smtp_server.arrived.wait(30), first.output()[-3000:]
        [delivery] = Delivery.objects.all()
        first.kill()
        smtp_server.arrived.clear()  # the retry is held as well, and its worker killed too

        second = start()
        swept = _sweep_after_the_lease()
        assert smtp_server.arrived.wait(30), second.output()[-3000:]
        assert swept.get("retried_in_doubt") == 1
        second.kill()
        smtp_server.release()

        third = start()
        swept = _sweep_after_the_lease()
        assert (swept["retried_in_doubt"], swept["abandoned"]) == (0, 1)
        deliveries_enqueue([delivery.pk])  # a duplicate message sends nothing either
        _fail(JobFactory(team=vision, owner=bob, name="next", state=JobState.RUNNING))
        mails = smtp_server.wait_for(3, timeout=30)
        time.sleep(1.0)
        assert len(smtp_server.messages) == 3, third.output()[-3000:]

    delivery.refresh_from_db()
    assert [m["Message-ID"] for m in mails[:2]] == [message_id(delivery)] * 2
    assert "next" in mails[2]["Subject"] and mails[2]["Message-ID"] != message_id(delivery)
    assert (delivery.state, delivery.attempts, delivery.retries_in_doubt) == (
        DeliveryState.UNKNOWN,
        2,
        1,
    )
    assert delivery.error == DeliveryError.IN_DOUBT
    assert "no retry is left" in delivery.last_error


def test_a_worker_mails_and_retries_a_failing_webhook_with_backoff(
    alice, bob, vision, receiver, smtp_server, tmp_path
):
    broker, xdist = _test_broker()
    queue = f"gpupool-notify-{xdist}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    bob.email = "bob@example.org"
    bob.save()
    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    receiver.statuses = [500, 503]
    worker = None
    try:
        with app_publishing_to(broker, queue, tasks="notifications"):
            worker = worker_start(
                queue=queue,
                broker=broker,
                database_url=_database_url(),
                log_path=tmp_path / "worker.log",
                extra_env={
                    "GPUPOOL_WEBHOOK_ALLOW_LOCAL": "true",
                    "GPUPOOL_WEBHOOK_ALLOW_HTTP": "true",
                    "GPUPOOL_NOTIFY_BACKOFF_SECONDS": "1",
                    "EMAIL_HOST": "127.0.0.1",
                    "EMAIL_PORT": str(smtp_server.port),
                },
            )
            job = JobFactory(team=vision, owner=bob, name="retried", state=JobState.RUNNING)
            _fail(job)
            [mail] = smtp_server.wait_for(1)
            assert mail["Subject"] == "[gpupool] retried failed (OOMKilled)"
            received = receiver.wait_for(3, timeout=30)
            assert len(received) == 3, worker.output()[-3000:]
            time.sleep(1.0)
        [delivery] = Delivery.objects.filter(channel="webhook")
        assert (delivery.state, delivery.attempts) == (DeliveryState.SENT, 3)
        assert len(receiver.received) == 3 and all(r.verified for r in receiver.received)
        # The waits grew: 1 s, then 2 s (the timestamps are whole seconds).
        stamps = [int(r.headers["X-Gpupool-Timestamp"]) for r in receiver.received]
        assert stamps[1] - stamps[0] >= 1 and stamps[2] - stamps[1] >= 2
        assert Delivery.objects.get(channel="email").state == DeliveryState.SENT
        assert len(smtp_server.messages) == 1
    finally:
        if worker is not None:
            worker.stop()
        _drop_queue(broker, queue)
