"""What each user wants to hear and where, the team webhooks, and the outbox of deliveries.

A :class:`portal.models.Notification` is the event for one recipient (the in-portal list is
its own channel). Every other channel gets one :class:`Delivery` row per (notification,
channel, recipient): the unique constraint is what makes a delivery happen at most once,
whatever the number of hook calls, sweeps or workers (``docs/notifications.md``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack-compatible webhook"


class Preference(models.Model):
    """One user's choices: for each event kind, the channels beyond the in-portal list (only
    email is a personal channel; team webhooks are the team's), and how long a queued job may
    wait before its owner hears of it. No row: the defaults (``notifications.preferences``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    events = models.JSONField(default=dict, help_text='{"job.failed": ["email"], …}')
    wait_threshold_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=60,
        help_text="Tell me when a job waits longer (empty: never)",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"preferences of {self.user_id}"


class TeamWebhook(models.Model):
    """A URL a team admin registered for the team's events: signed JSON, or Slack's format.

    ``secret`` is the HMAC key, sealed like cluster credentials (``clusters.secrets``): shown
    once when the webhook is created, then only its last characters (``secret_hint``).
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=2048)
    format = models.CharField(
        max_length=16,
        choices=[(Channel.WEBHOOK.value, "Signed JSON"), (Channel.SLACK.value, "Slack")],
        default=Channel.WEBHOOK,
    )
    events = models.JSONField(default=list, help_text="Event kinds sent to it")
    secret = models.TextField(editable=False, help_text="Encrypted; never shown after creation")
    secret_hint = models.CharField(max_length=16, editable=False)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_webhook_name_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.team_id}: {self.name}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"  # not yet tried, or waiting for its next try
    SENDING = "sending", "Sending"  # a worker holds it until lease_until
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"  # every try failed, or it cannot be sent (no address)
    # A worker died mid-send and no retry is left for it: it may or may not have arrived.
    UNKNOWN = "unknown", "Unknown"


class DeliveryError(models.TextChoices):
    """Why a delivery failed, as its log shows it: a category, never the remote's words nor
    an exception's message. A team admin chooses a webhook's URL, so whatever the remote or
    the network says would make every delivery an oracle into wherever the URL points (a
    port scan, a banner, a resolved address); the whole detail goes to the server log only.
    An HTTP answer's status code is kept beside it (``Delivery.error_status``)."""

    REFUSED = "refused", "connection refused"
    TIMEOUT = "timeout", "timed out"
    TLS = "tls", "TLS error"
    DNS = "dns", "host name does not resolve"
    CONNECTION = "connection", "connection failed"
    BLOCKED = "blocked", "blocked address"
    HTTP = "http", "HTTP error"  # shown as "HTTP <status>"
    REMOVED = "removed", "webhook removed or switched off"
    SECRET = "secret", "webhook secret unreadable"
    NO_EMAIL = "no_email", "your account has no email address"
    MAIL = "mail", "mail server refused or did not answer"
    # A send in doubt: its worker died between the claim and the record. Sent again under
    # the same idempotency id (``Delivery.key``) while a retry is left for it ...
    WORKER_STOPPED = (
        "worker_stopped",
        "the worker stopped while sending (it may have arrived); sent again with the same id",
    )
    # ... and recorded as this when none is (an e-mail or Slack message gets one retry; a
    # signed webhook as many as its tries).
    IN_DOUBT = (
        "in_doubt",
        "the worker stopped while sending and no retry is left (it may have arrived)",
    )
    OTHER = "other", "failed"


# What an HTTP status means to whoever set the webhook up, and what they could check.
HTTP_WORDS = {
    400: "the receiver refused the body as malformed",
    401: "the receiver refused the signature: check its secret and its clock",
    403: "the receiver forbids it",
    404: "not found at the receiver: check the URL",
    405: "the receiver does not take a POST there",
    408: "the receiver timed out reading it",
    410: "gone: the receiver removed this URL",
    413: "too large for the receiver",
    429: "the receiver asks to slow down",
    500: "error inside the receiver",
    502: "a proxy before the receiver got no good answer",
    503: "the receiver is unavailable",
    504: "a proxy before the receiver timed out",
}


def error_words(error: str, status: int | None = None) -> str:
    """A failure in words for a log or a page ("HTTP 500 (error inside the receiver)",
    "connection refused"), or "" for none: the category, and for an HTTP answer what its
    status means; never what the remote said."""
    if not error:
        return ""
    if error == DeliveryError.HTTP and status is not None:
        if status in HTTP_WORDS:
            words = HTTP_WORDS[status]
        elif 400 <= status < 500:
            words = "the receiver refused it"
        elif status >= 500:
            words = "error at the receiver"
        else:
            words = "not a 2xx answer"
        return f"HTTP {status} ({words})"
    try:
        return str(DeliveryError(error).label)
    except ValueError:
        return str(DeliveryError.OTHER.label)


class Delivery(models.Model):
    """One message of one notification on one channel to one recipient: the outbox row.

    ``recipient`` is ``user:<id>`` for an email, ``webhook:<id>`` for a team webhook; ``user``
    is whose notification it is (the delivery log on their settings page).

    ``key`` is the delivery's idempotency id, the same on every try: a webhook's
    ``Idempotency-Key`` header and body field, an e-mail's ``Message-ID``. It is what makes
    sending a delivery in doubt again safe (a receiver drops a key it has processed, a mail
    client folds a second message with the same id), so it is random rather than the row's
    id, which a restored or another installation would hand out again.
    """

    notification = models.ForeignKey(
        "portal.Notification", on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    recipient = models.CharField(max_length=40)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries"
    )
    webhook = models.ForeignKey(
        TeamWebhook, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    key = models.UUIDField(
        default=uuid.uuid4,
        unique=True,
        editable=False,
        help_text="The idempotency id: Idempotency-Key of a webhook, Message-ID of an e-mail",
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    retries_in_doubt = models.PositiveSmallIntegerField(
        default=0,
        help_text="Times it was sent again after a worker stopped mid-send (the earlier try "
        "may have arrived too, under the same idempotency id)",
    )
    next_attempt_at = models.DateTimeField()
    lease_until = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=16, choices=DeliveryError.choices, blank=True)
    error_status = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The HTTP status of a webhook's error answer"
    )
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "channel", "recipient"], name="one_delivery_per_channel"
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_due",
                condition=Q(state__in=["pending", "sending"]),
            ),
            models.Index(fields=["user", "-created_at"], name="delivery_log"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} {self.recipient} of {self.notification_id}: {self.state}"

    @property
    def last_error(self) -> str:
        """The last failure in words for its log ("HTTP 500", "connection refused"), or ""."""
        return error_words(self.error, self.error_status)

    @property
    def retried_after_interruption(self) -> bool:
        """Whether it was sent again after an interrupted send: its receiver may have it twice
        (with one idempotency id), which the delivery log must be able to say."""
        return self.retries_in_doubt > 0


class EmailVerification(models.Model):
    """An address a user asked to be e-mailed at, waiting for them to open the link sent to it.

    The account's ``email`` changes only once the link is opened, so every address the portal
    mails notifications to is one its owner proved they read (or one an administrator or the
    identity provider set). Only a hash of the link's token is kept: a database reader cannot
    verify an address they do not own.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="email_verification"
    )
    address = models.EmailField(max_length=254)
    token_hash = models.CharField(max_length=64, help_text="SHA-256 of the link's token, hex")
    sent_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.address} for {self.user_id} (not verified yet)"
