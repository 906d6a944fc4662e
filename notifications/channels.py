"""The channels: what one delivery sends, and sending it (email, signed JSON, Slack's body).

Each sender raises :class:`SendError` with a category (:class:`DeliveryError`, plus the
status of an HTTP answer) for the delivery log and the whole detail for the server log only:
a webhook's URL is chosen by a team admin, and what its remote or the network says must not
come back to them (``docs/notifications.md``). ``permanent`` says that trying again cannot
help (no address, a URL the guard refuses).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from urllib3.exceptions import NameResolutionError

from clusters.secrets import CredentialsUnreadable, text_open
from clusters.urlcheck import LOCAL, PRIVATE, UnresolvableHostError, UnsafeUrlError, check_api_url
from notifications.models import Channel, Delivery, DeliveryError, TeamWebhook
from notifications.signing import DELIVERY_HEADER, IDEMPOTENCY_HEADER, signature_headers
from portal.models import Notification


class SendError(Exception):
    """A failed send: ``error`` (and ``status``) is what its log shows; ``detail``, the
    message, goes to the server log only."""

    def __init__(
        self,
        error: DeliveryError,
        detail: str,
        *,
        status: int | None = None,
        permanent: bool = False,
    ) -> None:
        super().__init__(detail)
        self.error = error
        self.status = status
        self.detail = detail
        self.permanent = permanent


# The guard's words for a webhook: the operator settings that decide, not the clusters' ones.
_WEBHOOK_REASONS = {
    LOCAL: "is a loopback or link-local address (webhooks may reach one only where the "
    "operator setting GPUPOOL_WEBHOOK_ALLOW_LOCAL allows it)",
    PRIVATE: "is a private address (webhooks may reach only the private networks the operator "
    "lists in GPUPOOL_WEBHOOK_ALLOW_NETWORKS)",
}


def webhook_url_check(url: str) -> str:
    """The normalized URL if a webhook may post to it (the clusters' guard); else
    UnsafeUrlError saying why. Run when it is saved and again before every send (DNS may have
    changed in between).

    Private addresses are refused unless an operator lists their network: a team admin may
    not point the portal's requests into its internal network (Redis, PostgreSQL, a kubelet).
    The message never names the address a host name resolved to, so that the refusal does
    not map that network either."""
    schemes = ("https", "http") if settings.GPUPOOL_WEBHOOK_ALLOW_HTTP else ("https",)
    return check_api_url(
        url,
        allow_local=settings.GPUPOOL_WEBHOOK_ALLOW_LOCAL,
        allow_private=False,
        allow_networks=[
            ipaddress.ip_network(n, strict=False) for n in settings.GPUPOOL_WEBHOOK_ALLOW_NETWORKS
        ],
        what="the webhook URL",
        schemes=schemes,
        reasons=_WEBHOOK_REASONS,
        show_resolved=False,
    )


def _link(notification: Notification) -> str:
    base = settings.SITE_URL.rstrip("/")
    if notification.job is not None:
        return f"{base}/jobs/{notification.job.public_id}/"
    return f"{base}/notifications/"


def notification_payload(notification: Notification, delivery: Delivery) -> dict[str, Any]:
    """The JSON body of a webhook: the same fields for every event kind. ``idempotency_key``
    repeats the header for receivers that keep bodies, not headers."""
    job = notification.job
    return {
        "id": f"notification-{notification.pk}",
        "delivery": delivery.pk,
        "idempotency_key": str(delivery.key),
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
            # RESTARTING for a RUNNING job whose pods wait to be placed again (Job.status).
            "status": job.status,
        },
    }


def slack_payload(notification: Notification) -> dict[str, Any]:
    """Slack's incoming-webhook body (Mattermost and Rocket.Chat read it too)."""
    text = f"*{notification.title}*"
    if notification.message:
        text += f"\n{notification.message}"
    return {"text": f"{text}\n<{_link(notification)}|Open in gpupool>"}


def message_id(delivery: Delivery) -> str:
    """The e-mail's ``Message-ID``: the delivery's key at the portal's host name, the same on
    every try, so that a mail client shows a message sent again after a worker stopped
    mid-send as one. Not Django's default (``make_msgid``), which is new on each send and
    names the sending worker's host."""
    host = urlsplit(settings.SITE_URL).hostname or "gpupool.invalid"
    return f"<{delivery.key}@{host}>"


def email_send(delivery: Delivery) -> None:
    notification = delivery.notification
    address = delivery.user.email
    if not address:
        raise SendError(
            DeliveryError.NO_EMAIL, f"user {delivery.user_id} has no email address", permanent=True
        )
    body = notification.message + "\n\n" if notification.message else ""
    body += f"{_link(notification)}\n\nChange what you receive: {settings.SITE_URL.rstrip('/')}"
    body += "/settings/notifications/\n"
    message = EmailMessage(
        subject=f"[gpupool] {notification.title}",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        headers={"Message-ID": message_id(delivery)},
        connection=get_connection(timeout=settings.EMAIL_TIMEOUT),
    )
    try:
        message.send(fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSError
        raise SendError(DeliveryError.MAIL, f"{type(exc).__name__}: {exc}") from None


def webhook_send(delivery: Delivery) -> None:
    hook: TeamWebhook | None = delivery.webhook
    if hook is None or not hook.active:
        raise SendError(
            DeliveryError.REMOVED, "the webhook was removed or switched off", permanent=True
        )
    notification = delivery.notification
    payload = (
        slack_payload(notification)
        if delivery.channel == Channel.SLACK
        else notification_payload(notification, delivery)
    )
    webhook_post(hook, payload, delivery_ref=str(delivery.pk), key=str(delivery.key))


def webhook_post(hook: TeamWebhook, payload: dict[str, Any], *, delivery_ref: str, key: str) -> int:
    """Post one signed body to a webhook: the URL guard again (DNS may have changed since it
    was saved), the secret, the request. Returns the 2xx status; raises SendError with the
    category otherwise. Every send goes through here: a delivery, a test, a redelivery."""
    try:
        url = webhook_url_check(hook.url)
    except UnresolvableHostError as exc:  # may be a passing DNS failure: tried again
        raise SendError(DeliveryError.DNS, f"the webhook URL is refused: {exc}") from None
    except UnsafeUrlError as exc:
        raise SendError(
            DeliveryError.BLOCKED, f"the webhook URL is refused: {exc}", permanent=True
        ) from None
    try:
        secret = text_open(hook.secret, what=f"the secret of webhook {hook.name!r}")
    except CredentialsUnreadable as exc:
        raise SendError(DeliveryError.SECRET, str(exc), permanent=True) from None
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gpupool-webhook/1",
        DELIVERY_HEADER: delivery_ref,
        IDEMPOTENCY_HEADER: key,
        **signature_headers(secret, body),
    }
    try:
        with requests.post(
            url,
            data=body,
            headers=headers,
            timeout=settings.GPUPOOL_WEBHOOK_TIMEOUT_SECONDS,
            allow_redirects=False,  # a redirect could lead past the URL guard
            stream=True,  # an error answer's body is read only as far as the log needs
        ) as answer:
            if 200 <= answer.status_code < 300:
                return int(answer.status_code)
            detail = f"answered {answer.status_code} {answer.reason!r}: {_start_of(answer)!r}"
    except requests.RequestException as exc:
        raise SendError(transport_error(exc), f"{type(exc).__name__}: {exc}") from None
    permanent = answer.status_code in (404, 410)  # gone; a 401 may be clock skew
    raise SendError(DeliveryError.HTTP, detail, status=answer.status_code, permanent=permanent)


def _start_of(answer: requests.Response, limit: int = 300) -> bytes:
    """The first bytes of an answer's body, for the server log: a hostile receiver cannot
    make a worker read (or a log keep) more."""
    try:
        return bytes(answer.raw.read(limit, decode_content=True) or b"")
    except Exception as exc:  # urllib3's read errors are not requests'; the status is enough
        return f"(unreadable: {type(exc).__name__})".encode()


def transport_error(exc: BaseException) -> DeliveryError:
    """The category of a request that got no answer, from the exceptions it wraps (requests
    wraps urllib3's, which wraps the socket's): what a team admin may learn of it."""
    causes = _causes(exc)
    if any(isinstance(e, (requests.Timeout, TimeoutError)) for e in causes):
        return DeliveryError.TIMEOUT
    if any(isinstance(e, (requests.exceptions.SSLError, ssl.SSLError)) for e in causes):
        return DeliveryError.TLS
    if any(isinstance(e, (NameResolutionError, socket.gaierror)) for e in causes):
        return DeliveryError.DNS
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return DeliveryError.REFUSED
    if any(isinstance(e, (requests.ConnectionError, ConnectionError)) for e in causes):
        return DeliveryError.CONNECTION
    return DeliveryError.OTHER


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and all it wraps: causes, contexts, urllib3's ``reason``, and exceptions
    passed as arguments (requests' ConnectionError carries urllib3's MaxRetryError)."""
    found: list[BaseException] = []
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or any(item is seen for seen in found):
            continue
        found.append(item)
        todo.extend((item.__cause__, item.__context__, getattr(item, "reason", None)))
        todo.extend(item.args)
    return found


def channel_send(delivery: Delivery) -> None:
    if delivery.channel == Channel.EMAIL:
        email_send(delivery)
    else:
        webhook_send(delivery)
