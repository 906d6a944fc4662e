"""Team webhooks: team admins (and platform admins) add, list and remove them.

The signing secret is made here (32 random bytes, url-safe), returned once by
:func:`webhook_create` for the admin to copy into the receiver, and stored only sealed
(``clusters.secrets.text_seal``, the cluster credentials' keys). The URL passes the clusters'
guard (``channels.webhook_url_check``) now and again before every send.
"""

from __future__ import annotations

import logging
import secrets as pysecrets
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from clusters.secrets import text_seal
from clusters.urlcheck import UnsafeUrlError
from notifications.channels import SendError, webhook_post, webhook_url_check
from notifications.models import Channel, Delivery, DeliveryState, TeamWebhook, error_words
from notifications.outbox import TEAM_KINDS, delivery_send
from portal.access import AnyUser, team_roles_of
from portal.errors import ApplicationError, Forbidden, NotFound
from portal.models import Role, Team
from portal.team_audit import changed_fields, team_change_record

log = logging.getLogger(__name__)

# The team events a webhook may receive, in the words its form and list show (the code stays
# beside them, as the receiver sees it in ``type``).
TEAM_EVENT_WORDS: dict[str, str] = {
    "job.running": "A team job started",
    "job.succeeded": "A team job succeeded",
    "job.failed": "A team job failed",
    "job.preempted": "A team job was preempted",
    "job.requeued": "A team job was requeued",
    "job.cancelled": "A team job was cancelled by someone other than its owner",
    "job.waiting": "A team job has waited longer than its owner's threshold",
    "job.near_max_runtime": "A team job is close to its max runtime",
    "team.quota_changed": "The team's quota changed",
}
assert set(TEAM_EVENT_WORDS) == TEAM_KINDS, "every team event needs its words"
TEST_KIND = "webhook.test"
# Redelivering one that is on its way already would race its worker: only a settled one.
REDELIVERABLE = (DeliveryState.SENT, DeliveryState.FAILED, DeliveryState.UNKNOWN)

DEFAULT_WEBHOOK_EVENTS = sorted(
    {"job.succeeded", "job.failed", "job.preempted", "job.cancelled", "team.quota_changed"}
)


def team_for_webhooks(user: AnyUser, slug: str) -> Team:
    """The team, if the caller may see its webhooks: its admins and platform admins. A team
    the caller is not in is a 404 (as for jobs); a member or viewer is a 403."""
    team = Team.objects.filter(slug=slug).first()
    if team is None or not user.is_authenticated:
        raise NotFound("No such team.")
    if user.is_staff:
        return team
    role = team_roles_of(user).get(team.pk)
    if role is None:
        raise NotFound("No such team.")
    if role != Role.ADMIN:
        raise Forbidden("Only the team's admins manage its webhooks.")
    return team


def webhooks_of(team: Team) -> QuerySet[TeamWebhook]:
    return TeamWebhook.objects.filter(team=team).order_by("name")


def _events(value: Any) -> list[str]:
    if value is None:
        return list(DEFAULT_WEBHOOK_EVENTS)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApplicationError("Invalid events.", fields={"events": ["A list of event kinds."]})
    unknown = sorted(set(value) - TEAM_KINDS)
    if unknown:
        raise ApplicationError(
            f"Unknown event {unknown[0]!r}.",
            fields={
                "events": [f"Unknown event {unknown[0]!r}; one of {', '.join(sorted(TEAM_KINDS))}."]
            },
        )
    return sorted(set(value))


def webhook_create(
    *, team: Team, by: AnyUser, name: Any, url: Any, format: Any = None, events: Any = None
) -> tuple[TeamWebhook, str]:
    """A new webhook of ``team`` and its signing secret (shown once, never stored in clear).
    Bad input is an ApplicationError naming the field; nothing is stored then."""
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ApplicationError("Invalid name.", fields={"name": ["1 to 100 characters."]})
    fmt = Channel.WEBHOOK.value if format is None else format
    if fmt not in (Channel.WEBHOOK.value, Channel.SLACK.value):
        raise ApplicationError("Invalid format.", fields={"format": ["webhook or slack."]})
    if not isinstance(url, str):
        raise ApplicationError("Invalid URL.", fields={"url": ["A URL."]})
    try:
        normalized = webhook_url_check(url)
    except UnsafeUrlError as exc:
        raise ApplicationError(
            f"The webhook URL is refused: {exc}", fields={"url": [str(exc)]}
        ) from None
    kinds = _events(events)
    secret = pysecrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            hook = TeamWebhook.objects.create(
                team=team,
                name=name.strip(),
                url=normalized,
                format=fmt,
                events=kinds,
                secret=text_seal(secret),
                secret_hint="…" + secret[-4:],
                created_by_id=by.pk,
            )
            team_change_record(
                team=team,
                actor=by,
                kind="webhook",
                action="created",
                subject=hook.name,
                detail=changed_fields({}, _audited(hook)),
            )
    except IntegrityError:
        raise ApplicationError(
            "A webhook of this team has that name.", fields={"name": ["Already used."]}
        ) from None
    return hook, secret


def _audited(hook: TeamWebhook) -> dict[str, Any]:
    """What the team's audit may say about a hook: never its secret (nor its hint)."""
    return {"url": hook.url, "format": hook.format, "events": hook.events}


@transaction.atomic
def webhook_delete(*, team: Team, webhook_id: int, by: AnyUser | None = None) -> None:
    hook = TeamWebhook.objects.select_for_update().filter(team=team, pk=webhook_id).first()
    if hook is None:
        raise NotFound("No such webhook.")
    team_change_record(
        team=team,
        actor=by,
        kind="webhook",
        action="deleted",
        subject=hook.name,
        detail=changed_fields(_audited(hook), {}),
    )
    hook.delete()


def webhook_events_in_words(kinds: list[str]) -> list[str]:
    """A webhook's events as its list shows them (an unknown kind as itself)."""
    return [TEAM_EVENT_WORDS.get(k, k) for k in kinds]


@dataclass(frozen=True)
class SendOutcome:
    """What a test or a redelivery did, as the page says it: ``words`` is the error's category
    in words (never the receiver's answer), empty when it arrived."""

    ok: bool
    status: int | None = None
    error: str = ""
    words: str = ""
    state: str = ""


def webhook_of(team: Team, webhook_id: int) -> TeamWebhook:
    hook = TeamWebhook.objects.filter(team=team, pk=webhook_id).first()
    if hook is None:
        raise NotFound("No such webhook.")
    return hook


def webhook_test_payload(hook: TeamWebhook, *, by: AnyUser, key: str) -> dict[str, Any]:
    """The body of a test: the signed JSON's fields (``type`` ``webhook.test``, no job), or
    Slack's text, so that the receiver is tested with the format it will get."""
    who = getattr(by, "username", "") or "an admin"
    title = "Test from gpupool"
    message = f"{who} sent a test to webhook {hook.name} of team {hook.team.name}."
    url = f"{settings.SITE_URL.rstrip('/')}/teams/{hook.team.slug}/webhooks/"
    if hook.format == Channel.SLACK:
        return {"text": f"*{title}*\n{message}\n<{url}|Open in gpupool>"}
    return {
        "id": f"test-{key}",
        "delivery": None,
        "idempotency_key": key,
        "type": TEST_KIND,
        "created_at": timezone.now().isoformat(),
        "title": title,
        "message": message,
        "url": url,
        "job": None,
    }


def webhook_test_send(*, team: Team, webhook_id: int, by: AnyUser) -> SendOutcome:
    """Send a test now, signed like every delivery, and say how it went. Nothing is stored
    but the team's audit row; the detail of a failure goes to the server log only."""
    hook = webhook_of(team, webhook_id)
    key = str(uuid.uuid4())
    team_change_record(team=team, actor=by, kind="webhook", action="tested", subject=hook.name)
    try:
        status = webhook_post(
            hook, webhook_test_payload(hook, by=by, key=key), delivery_ref=f"test-{key}", key=key
        )
    except SendError as exc:
        log.warning(
            "test of webhook %s (team %s) failed: %s: %s",
            hook.pk,
            team.slug,
            exc.error.value,
            exc.detail[:2000],
        )
        return SendOutcome(
            ok=False,
            status=exc.status,
            error=exc.error.value,
            words=error_words(exc.error, exc.status),
        )
    return SendOutcome(ok=True, status=status)


def team_webhook_deliveries(team: Team, *, limit: int = 50) -> QuerySet[Delivery]:
    """The team's webhook deliveries, newest first (its admins redeliver from this log)."""
    return (
        Delivery.objects.filter(webhook__team=team)
        .select_related("notification", "webhook")
        .order_by("-id")[:limit]
    )


def delivery_redeliver(*, team: Team, delivery_id: int, by: AnyUser) -> SendOutcome:
    """Send one of the team's webhook deliveries again, now, under its own key (a receiver
    that processed it drops the repeat; one that never got it acts). Only a settled delivery
    (sent, failed, unknown): one pending or being sent is on its way already. The try counts
    with the others; if it fails and tries are left, the outbox retries it as usual."""
    with transaction.atomic():
        row = (
            Delivery.objects.select_for_update()
            .select_related("webhook")
            .filter(pk=delivery_id, webhook__team=team)
            .first()
        )
        if row is None:
            raise NotFound("No such delivery.")
        if row.state not in REDELIVERABLE:
            raise ApplicationError(
                "This delivery is on its way already.",
                fields={"delivery": ["Pending or being sent: wait for it to settle."]},
            )
        Delivery.objects.filter(pk=row.pk).update(
            state=DeliveryState.PENDING,
            next_attempt_at=timezone.now(),
            lease_until=None,
            error="",
            error_status=None,
        )
        team_change_record(
            team=team,
            actor=by,
            kind="webhook",
            action="redelivered",
            subject=row.webhook.name if row.webhook else "",
            detail=f"delivery {row.pk}",
        )
    # Committed: a worker or the sweep may claim it too; the claim lets one of us send.
    state = delivery_send(row.pk)
    row.refresh_from_db()
    if state is None:  # another worker claimed it first: it is on its way
        return SendOutcome(ok=True, state=row.state)
    return SendOutcome(
        ok=state == DeliveryState.SENT,
        status=row.error_status,
        error=row.error,
        words=row.last_error,
        state=state,
    )
