"""Team webhooks: team admins (and platform admins) add, list and remove them.

The signing secret is made here (32 random bytes, url-safe), returned once by
:func:`webhook_create` for the admin to copy into the receiver, and stored only sealed
(``clusters.secrets.text_seal``, the cluster credentials' keys). The URL passes the clusters'
guard (``channels.webhook_url_check``) now and again before every send.
"""

from __future__ import annotations

import secrets as pysecrets
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from clusters.secrets import text_seal
from clusters.urlcheck import UnsafeUrlError
from notifications.channels import webhook_url_check
from notifications.models import Channel, TeamWebhook
from notifications.outbox import TEAM_KINDS
from portal.access import AnyUser, team_roles_of
from portal.errors import ApplicationError, Forbidden, NotFound
from portal.models import Role, Team
from portal.team_audit import changed_fields, team_change_record

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
