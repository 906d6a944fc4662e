"""The notifications' Celery tasks (thin: the logic is in ``outbox`` and ``events``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from notifications.events import jobs_watch
from notifications.models import Delivery, DeliveryState
from notifications.outbox import backoff_seconds, deliveries_sweep, delivery_send


@shared_task(name="notifications.deliver", bind=True, max_retries=None, acks_late=False)
def deliver(self: Any, delivery_id: int) -> str | None:
    """Send one delivery; a failure that may pass is retried by Celery after the delivery's
    backoff (BACKOFF × 2^(tries-1)). ``acks_late`` is off on purpose: a worker killed
    mid-send must not get the message back from the broker, whose redelivery counts nothing;
    the lease and the sweep decide whether a send in doubt is made again, and how often."""
    state = delivery_send(delivery_id)
    if state == DeliveryState.PENDING:
        attempts = Delivery.objects.filter(pk=delivery_id).values_list("attempts", flat=True)
        raise self.retry(countdown=backoff_seconds(attempts.first() or 1))
    return state


@shared_task(name="notifications.sweep")
def sweep() -> dict[str, int]:
    return deliveries_sweep()


@shared_task(name="notifications.watch_jobs")
def watch_jobs() -> int:
    return len(jobs_watch())
