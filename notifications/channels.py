"""The channels: what one delivery sends, and sending it (email, signed JSON, Slack's body).

Each sender raises :class:`SendError` with a message a user can read in their delivery log;
``permanent`` says that trying again cannot help (no address, a URL the guard refuses).
"""

from __future__ import annotations

import json
from typing import Any

import requests
from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from clusters.secrets import CredentialsUnreadable, text_open
from clusters.urlcheck import UnsafeUrlError, check_api_url
from notifications.models import Channel, Delivery, TeamWebhook
from notifications.signing import DELIVERY_HEADER, signature_headers
from portal.models import Notification


class SendError(Exception):
    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def webhook_url_check(url: str) -> str:
    """The normalized URL if a webhook may post to it (the clusters' guard); else
    UnsafeUrlError saying why. Run when it is saved and again before every send (DNS may have
    changed in between)."""
    schemes = ("https", "http") if settings.GPUPOOL_WEBHOOK_ALLOW_HTTP else ("https",)
    return check_api_url(
        url,
        allow_local=settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL,
        allow_private=settings.GPUPOOL_WEBHOOK_ALLOW_PRIVATE,
        what="the webhook URL",
        schemes=schemes,
    )


def _link(notification: Notification) -> str:
    base = settings.SITE_URL.rstrip("/")
    if notification.job is not None:
        return f"{base}/jobs/{notification.job.public_id}/"
    return f"{base}/notifications/"


def notification_payload(notification: Notification, delivery_id: int) -> dict[str, Any]:
    """The JSON body of a webhook: the same fields for every event kind."""
    job = notification.job
    return {
        "id": f"notification-{notification.pk}",
        "delivery": delivery_id,
        "type": notification.kind,
        "created_at": notification.created_at.isoformat(),
        "title": notification.title,
        "message": notification.message,
        "url": _link(notification),
        "job": None
        if job is None
        else {
            "id": str(job.public_id),
            "name": job.name,
            "team": job.team.slug,
            "state": job.state,
        },
    }


def slack_payload(notification: Notification) -> dict[str, Any]:
    """Slack's incoming-webhook body (Mattermost and Rocket.Chat read it too)."""
    text = f"*{notification.title}*"
    if notification.message:
        text += f"\n{notification.message}"
    return {"text": f"{text}\n<{_link(notification)}|Open in gpupool>"}


def email_send(delivery: Delivery) -> None:
    notification = delivery.notification
    address = delivery.user.email
    if not address:
        raise SendError("your account has no email address", permanent=True)
    body = notification.message + "\n\n" if notification.message else ""
    body += f"{_link(notification)}\n\nChange what you receive: {settings.SITE_URL.rstrip('/')}"
    body += "/settings/notifications/\n"
    message = EmailMessage(
        subject=f"[gpupool] {notification.title}",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        # One id per delivery: a mail client shows a duplicate as one message, if one ever came.
        headers={"Message-ID": f"<delivery-{delivery.pk}@gpupool>"},
        connection=get_connection(timeout=settings.EMAIL_TIMEOUT),
    )
    try:
        message.send(fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSError
        raise SendError(f"the mail server refused or did not answer: {exc}") from None


def webhook_send(delivery: Delivery) -> None:
    hook: TeamWebhook | None = delivery.webhook
    if hook is None or not hook.active:
        raise SendError("the webhook was removed or switched off", permanent=True)
    try:
        url = webhook_url_check(hook.url)
    except UnsafeUrlError as exc:
        raise SendError(f"the webhook URL is refused: {exc}", permanent=True) from None
    try:
        secret = text_open(hook.secret, what=f"the secret of webhook {hook.name!r}")
    except CredentialsUnreadable as exc:
        raise SendError(str(exc), permanent=True) from None
    notification = delivery.notification
    payload = (
        slack_payload(notification)
        if delivery.channel == Channel.SLACK
        else notification_payload(notification, delivery.pk)
    )
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gpupool-webhook/1",
        DELIVERY_HEADER: str(delivery.pk),
        **signature_headers(secret, body),
    }
    try:
        answer = requests.post(
            url,
            data=body,
            headers=headers,
            timeout=settings.GPUPOOL_WEBHOOK_TIMEOUT_SECONDS,
            allow_redirects=False,  # a redirect could lead past the URL guard
        )
    except requests.RequestException as exc:
        raise SendError(f"the webhook did not answer: {type(exc).__name__}") from None
    if not 200 <= answer.status_code < 300:
        permanent = answer.status_code in (404, 410)  # gone; a 401 may be clock skew
        raise SendError(f"the webhook answered {answer.status_code}", permanent=permanent)


def channel_send(delivery: Delivery) -> None:
    if delivery.channel == Channel.EMAIL:
        email_send(delivery)
    else:
        webhook_send(delivery)
