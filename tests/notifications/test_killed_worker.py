"""A Celery worker killed in the middle of a webhook send: the message arrives once, never
twice. The delivery is recorded "unknown" with the reason, in the owner's delivery log."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from notifications.models import Delivery, DeliveryState
from notifications.outbox import deliveries_enqueue, deliveries_sweep
from notifications.preferences import preferences_set
from notifications.webhooks import webhook_create
from portal.jobs.state import job_transition
from portal.models import JobState
from tests.clusters.conftest import (
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


def test_a_worker_killed_mid_send_sends_once(alice, bob, vision, receiver, tmp_path):
    broker, xdist = _test_broker()
    queue = f"gpupool-notify-{xdist}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    env = {
        "GPUPOOL_WEBHOOK_ALLOW_LOCAL": "true",
        "GPUPOOL_WEBHOOK_ALLOW_HTTP": "true",
        "GPUPOOL_NOTIFY_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    workers = []

    def start() -> Any:
        worker = worker_start(
            queue=queue,
            broker=broker,
            database_url=_database_url(),
            log_path=tmp_path / f"worker-{len(workers)}.log",
            extra_env=env,
        )
        workers.append(worker)
        return worker

    _, receiver.secret = webhook_create(
        team=vision, by=alice, name="ci", url=receiver.url, events=["job.failed"]
    )
    # The webhook is the only delivery: bob's default mail for a failed job would be sent by
    # the worker's other process, and the kill could catch that one mid-send too.
    preferences_set(user=bob, data={"events": {"job.failed": []}})
    receiver.hold = threading.Event()
    try:
        with app_publishing_to(broker, queue, tasks="notifications"):
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
            time.sleep(LEASE_SECONDS + 0.5)
            assert deliveries_sweep()["abandoned"] == 1
            delivery.refresh_from_db()
            assert delivery.state == DeliveryState.UNKNOWN
            assert "not sent again" in delivery.last_error

            # A duplicate message for it (a restored broker, an operator's retry) sends nothing,
            # while the same worker delivers new events.
            deliveries_enqueue([delivery.pk])
            other = JobFactory(team=vision, owner=bob, name="next", state=JobState.RUNNING)
            _fail(other)
            received = receiver.wait_for(2, timeout=30)
            time.sleep(1.0)
            assert len(receiver.received) == 2, second.output()[-3000:]
            assert [r.json()["job"]["name"] for r in received] == ["killed", "next"]
            assert all(r.verified for r in received)
            assert Delivery.objects.get(pk=delivery.pk).state == DeliveryState.UNKNOWN
    finally:
        for worker in workers:
            worker.stop()
        _drop_queue(broker, queue)


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
