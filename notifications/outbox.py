"""The outbox: one Delivery row per (notification, channel, recipient), sent by Celery.

Fan-out runs from :data:`portal.hooks.notifications_created`, after the state change has
committed, in its own transaction, so a bug or an outage here can never roll back or delay a
job's transition. If the process dies between the commit and the fan-out, the sweep fans out
the recent notifications that have no delivery yet (the unique constraint makes a second
fan-out a no-op).

Sending is at least once, each message under one idempotency id (``docs/decisions.md``)::

    pending --claim (UPDATE … WHERE state='pending', lease)--> sending --send ok--> sent
       ^  ^                                                      |  send failed
       |  +---- next_attempt_at = now + backoff × 2^(n-1) -------+  (or failed: last try,
       |                                                             or nothing can help)
       +-- sweep: sending, lease expired (the worker died mid-send: in doubt), a retry left
    sending, lease expired, no retry left --sweep--> unknown (it may have arrived)

A send in doubt may have arrived, so sending it again is safe only because every try carries
the same id (``Delivery.key``: a webhook's ``Idempotency-Key``, an e-mail's ``Message-ID``).
A receiver can drop a signed webhook's key it has processed, so such a webhook in doubt is
retried while it has tries left; a mail client may only fold the duplicate in its view, and
Slack reads no key at all, so an e-mail or a Slack message in doubt is retried once
(:data:`PEOPLE_RETRIES_IN_DOUBT`). ``retries_in_doubt`` counts them for the delivery log.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from notifications.channels import SendError, channel_send
from notifications.models import Channel, Delivery, DeliveryError, DeliveryState, TeamWebhook
from notifications.preferences import preferences_of_many
from portal.models import Notification

log = logging.getLogger(__name__)

FAN_OUT_WINDOW = dt.timedelta(hours=6)
# An e-mail or a Slack message in doubt is sent again this many times at most: people read
# them, a second copy is folded by the mail clients that thread on Message-ID and shown twice
# by the others (and by Slack); a third would be noise.
PEOPLE_RETRIES_IN_DOUBT = 1
DELIVER_TASK = "notifications.deliver"
# Kinds about one team's jobs or quota that a team webhook may receive.
TEAM_KINDS = frozenset(
    {
        "job.running",
        "job.succeeded",
        "job.failed",
        "job.preempted",
        "job.requeued",
        "job.cancelled",
        "job.waiting",
        "job.near_max_runtime",
        "team.quota_changed",
    }
)


def _due(
    n: Notification,
    channel: str,
    recipient: str,
    now: dt.datetime,
    webhook: TeamWebhook | None = None,
) -> Delivery:
    """One outbox row, due now: (notification, channel, recipient) is unique, so a second
    fan-out of the same notification adds nothing."""
    return Delivery(
        notification=n,
        channel=channel,
        recipient=recipient,
        user_id=n.user_id,
        webhook=webhook,
        next_attempt_at=now,
        created_at=now,
    )


def fan_out(
    notification_ids: Iterable[int], *, webhooks_for: dict[int, int] | None = None
) -> list[int]:
    """Write the outbox rows the recipients' preferences and their teams' webhooks ask for;
    returns the ids of the new rows (already there: skipped). ``webhooks_for`` maps a
    notification to the team whose webhooks get it; by default a job notification goes to its
    job's team (a team-wide notice sent to every member names its team for one row only)."""
    rows = list(
        Notification.objects.filter(pk__in=list(notification_ids)).select_related("job", "user")
    )
    if not rows:
        return []
    now = timezone.now()
    prefs = preferences_of_many(sorted({n.user_id for n in rows}))
    wanted: list[Delivery] = []
    team_of: dict[int, int] = dict(webhooks_for or {})
    for n in rows:
        if webhooks_for is None and n.job is not None:
            team_of[n.pk] = n.job.team_id
    hooks_by_team: dict[int, list[TeamWebhook]] = {}
    for hook in TeamWebhook.objects.filter(team_id__in=set(team_of.values()), active=True):
        hooks_by_team.setdefault(hook.team_id, []).append(hook)
    for n in rows:
        # E-mail is off for a user with no address (verified by them, or set by an
        # administrator or the identity provider): nothing to send, so no row to fail.
        if n.user.email and Channel.EMAIL in prefs[n.user_id].channels_for(n.kind):
            wanted.append(_due(n, Channel.EMAIL, f"user:{n.user_id}", now))
        if n.kind not in TEAM_KINDS:
            continue
        for hook in hooks_by_team.get(team_of.get(n.pk, -1), []):
            if n.kind in (hook.events or []):
                wanted.append(_due(n, hook.format, f"webhook:{hook.pk}", now, webhook=hook))
    if not wanted:
        return []
    keys = {(d.notification_id, d.channel, d.recipient) for d in wanted}
    with transaction.atomic():
        Delivery.objects.bulk_create(wanted, ignore_conflicts=True)
        created = Delivery.objects.filter(
            notification_id__in=[n.pk for n in rows], state=DeliveryState.PENDING, attempts=0
        ).values_list("pk", "notification_id", "channel", "recipient")
        ids = [pk for pk, *key in created if tuple(key) in keys]
    return ids


def fan_out_and_enqueue(notification_ids: list[int]) -> None:
    """The listener of ``notifications_created`` (on commit): never raises, so that the
    firing request or task is not harmed; what it could not do, the sweep does."""
    try:
        ids = fan_out(notification_ids)
    except Exception:
        log.exception("notification fan-out failed; the sweep will retry it")
        return
    deliveries_enqueue(ids)


def deliveries_enqueue(ids: list[int], *, countdown: float = 0) -> None:
    """Ask Celery to send these deliveries; a broker outage is logged (the sweep re-sends)."""
    for pk in ids:
        try:
            # By name: the tasks module imports this one (no import inside a function).
            current_app.send_task(DELIVER_TASK, args=(pk,), countdown=countdown)
        except Exception:
            log.warning("could not enqueue delivery %s; the sweep will", pk, exc_info=True)
            return


def backoff_seconds(attempts: int) -> int:
    """The wait before the next try after ``attempts`` tries: BACKOFF × 2^(attempts-1)."""
    return int(settings.GPUPOOL_NOTIFY_BACKOFF_SECONDS * 2 ** max(0, attempts - 1))


def delivery_claim(pk: int, *, now: dt.datetime | None = None) -> Delivery | None:
    """Take the delivery for one send if it is due and nobody holds it: a compare-and-set, so
    of two workers (a duplicated message, the sweep and a retry) only one sends. Its
    ``lease_until``, as stored, is the claim's fencing token (:func:`_record`)."""
    now = now or timezone.now()
    lease = now + dt.timedelta(seconds=settings.GPUPOOL_NOTIFY_LEASE_SECONDS)
    taken = Delivery.objects.filter(
        pk=pk, state=DeliveryState.PENDING, next_attempt_at__lte=now
    ).update(state=DeliveryState.SENDING, lease_until=lease)
    if not taken:
        return None
    return Delivery.objects.select_related("notification__job__team", "user", "webhook").get(pk=pk)


def _record(delivery: Delivery, **fields: object) -> int:
    """Write a send's outcome if this claim still holds the row. A worker that outlived its
    lease may find the row given to the sweep (in doubt, pending again) and claimed anew: its
    late outcome must not end the new claim's send, so the update matches the claim's own
    lease as well as the state."""
    return Delivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.SENDING, lease_until=delivery.lease_until
    ).update(lease_until=None, **fields)


def delivery_send(pk: int, *, now: dt.datetime | None = None) -> str | None:
    """Claim, send, record. Returns the new state (None: not claimed, or no longer this
    claim's to record: the sweep took it as in doubt, and its retry decides)."""
    delivery = delivery_claim(pk, now=now)
    if delivery is None:
        return None
    attempts = delivery.attempts + 1
    try:
        channel_send(delivery)
    except SendError as exc:
        last = exc.permanent or attempts >= settings.GPUPOOL_NOTIFY_MAX_ATTEMPTS
        state = DeliveryState.FAILED if last else DeliveryState.PENDING
        # The row keeps the category only (its log is read by the team); the detail (the
        # remote's answer, the refused address, the exception) is for the operators.
        log.warning(
            "delivery %s (%s to %s, try %s) failed, %s: %s: %s",
            pk,
            delivery.channel,
            delivery.recipient,
            attempts,
            state,
            exc.error.value,
            exc.detail[:2000],
        )
        recorded = _record(
            delivery,
            state=state,
            attempts=attempts,
            error=exc.error,
            error_status=exc.status,
            next_attempt_at=timezone.now() + dt.timedelta(seconds=backoff_seconds(attempts)),
        )
    else:
        state = DeliveryState.SENT
        recorded = _record(delivery, state=state, attempts=attempts, sent_at=timezone.now())
    if not recorded:
        log.warning("delivery %s outlived its lease; its retry in doubt records it", pk)
        return None
    return str(state)


def _retry_left_in_doubt(channel: str, attempts: int, retries_in_doubt: int) -> bool:
    """Whether a delivery whose worker died mid-send (that try counted in ``attempts``) is
    sent again: a signed webhook while it has tries left, its receiver can drop the repeated
    key; an e-mail or a Slack message :data:`PEOPLE_RETRIES_IN_DOUBT` times, as a mail client
    can only fold it and Slack reads no key."""
    if attempts >= settings.GPUPOOL_NOTIFY_MAX_ATTEMPTS:
        return False
    return channel == Channel.WEBHOOK or retries_in_doubt < PEOPLE_RETRIES_IN_DOUBT


def deliveries_in_doubt_resolve(*, now: dt.datetime | None = None) -> tuple[list[int], int]:
    """Deliveries still ``sending`` past their lease (the worker died between the claim and
    the record, so the message may or may not have arrived): pending again, due now, where a
    retry is left, else ``unknown``. Returns the ids to send again and the count given up.

    The rows are locked (skipping those another sweep holds) so that two sweeps count a
    retry once; a worker that is only late finds the row no longer its claim (``_record``)."""
    now = now or timezone.now()
    with transaction.atomic():
        stuck = list(
            Delivery.objects.select_for_update(skip_locked=True)
            .filter(state=DeliveryState.SENDING, lease_until__lt=now)
            .values_list("pk", "channel", "attempts", "retries_in_doubt")
        )
        again = [
            pk
            for pk, channel, attempts, in_doubt in stuck
            if _retry_left_in_doubt(channel, attempts + 1, in_doubt)
        ]
        given_up = sorted({pk for pk, *_ in stuck} - set(again))
        Delivery.objects.filter(pk__in=again).update(
            state=DeliveryState.PENDING,
            attempts=F("attempts") + 1,
            retries_in_doubt=F("retries_in_doubt") + 1,
            lease_until=None,
            next_attempt_at=now,
            error=DeliveryError.WORKER_STOPPED,
            error_status=None,
        )
        Delivery.objects.filter(pk__in=given_up).update(
            state=DeliveryState.UNKNOWN,
            attempts=F("attempts") + 1,
            lease_until=None,
            error=DeliveryError.IN_DOUBT,
            error_status=None,
        )
    if stuck:
        log.warning(
            "deliveries in doubt (worker stopped mid-send): sent again %s, given up %s",
            again,
            given_up,
        )
    return again, len(given_up)


def deliveries_sweep(*, now: dt.datetime | None = None) -> dict[str, int]:
    """The periodic repair: deliveries whose worker died mid-send are sent again or, with no
    retry left, become ``unknown`` (:func:`deliveries_in_doubt_resolve`), recent
    notifications without an outbox row are fanned out, and due deliveries whose message was
    lost are enqueued again."""
    now = now or timezone.now()
    retried, abandoned = deliveries_in_doubt_resolve(now=now)
    missing = list(
        Notification.objects.filter(
            created_at__gte=now - FAN_OUT_WINDOW, deliveries__isnull=True
        ).values_list("pk", flat=True)[:1000]
    )
    fanned = fan_out(missing) if missing else []
    # Due for a while (a lost message, a restarted broker): send again. Fresh ones are in
    # flight already; the claim keeps a duplicate from sending twice anyway.
    stale = now - dt.timedelta(seconds=settings.GPUPOOL_NOTIFY_SWEEP_INTERVAL)
    due = list(
        Delivery.objects.filter(
            Q(next_attempt_at__lte=stale) | Q(pk__in=fanned) | Q(pk__in=retried),
            state=DeliveryState.PENDING,
        ).values_list("pk", flat=True)[:1000]
    )
    deliveries_enqueue(due)
    return {
        "retried_in_doubt": len(retried),
        "abandoned": abandoned,
        "fanned_out": len(fanned),
        "enqueued": len(due),
    }
