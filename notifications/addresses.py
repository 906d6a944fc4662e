"""A user's own e-mail address, set by them and proved by a link e-mailed to it.

``email_address_request`` keeps the new address aside (:class:`EmailVerification`) and mails
a one-time link to it; ``email_address_verify`` makes it the account's address when that link
is opened by the same user within :data:`TOKEN_LIFETIME`. Until then nothing is mailed to it,
and a user with no address gets no e-mail delivery at all (``notifications.outbox.fan_out``),
rather than a delivery log full of failures.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from notifications.models import EmailVerification
from portal.access import AnyUser
from portal.errors import ApplicationError

TOKEN_LIFETIME = dt.timedelta(hours=24)


def _hours(span: dt.timedelta) -> int:
    return int(span.total_seconds() // 3600)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def email_address_request(
    *, user: AnyUser, address: str, link_for: str, now: dt.datetime | None = None
) -> EmailVerification:
    """Keep ``address`` aside for ``user`` and mail it the verification link (``link_for`` with
    ``{token}`` in it). A second request replaces the first (its link stops working). Bad input,
    or a mail server that refuses, is an ApplicationError naming the ``email`` field; nothing is
    kept then."""
    address = (address or "").strip()
    try:
        validate_email(address)
    except ValidationError:
        raise ApplicationError(
            "Invalid e-mail address.", fields={"email": ["Enter an e-mail address: name@host."]}
        ) from None
    now = now or timezone.now()
    token = secrets.token_urlsafe(32)
    link = link_for.replace("{token}", token)
    message = EmailMessage(
        subject="[gpupool] Confirm your e-mail address",
        body=(
            f"Someone (we hope you, {user.get_username()}) asked gpupool to send notifications "
            f"to this address. Open this link within {_hours(TOKEN_LIFETIME)} hours, signed in "
            f"as {user.get_username()}, to confirm it:\n\n{link}\n\n"
            "If it was not you, ignore this message: nothing will be sent here.\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        connection=get_connection(timeout=settings.EMAIL_TIMEOUT),
    )
    with transaction.atomic():
        pending, _ = EmailVerification.objects.update_or_create(
            user_id=user.pk,
            defaults={"address": address, "token_hash": _hash(token), "sent_at": now},
        )
        try:
            message.send(fail_silently=False)
        except (OSError, ValueError):  # smtplib's errors are OSError; rolls the row back
            raise ApplicationError(
                "The confirmation e-mail could not be sent.",
                fields={"email": ["The mail server did not take the message; try again later."]},
            ) from None
    return pending


def email_address_verify(*, user: AnyUser, token: str, now: dt.datetime | None = None) -> str:
    """Make the address the link was sent to the account's own; returns it. A token that is
    not this user's latest, or is older than :data:`TOKEN_LIFETIME`, is an ApplicationError
    naming ``token`` and changes nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        pending = EmailVerification.objects.select_for_update().filter(user_id=user.pk).first()
        if pending is None or not hmac.compare_digest(pending.token_hash, _hash(token or "")):
            raise ApplicationError(
                "This confirmation link is not valid.",
                fields={
                    "token": [
                        "The link is not valid for your account: it was replaced by a newer "
                        "one, already used, or opened while signed in as someone else."
                    ]
                },
            )
        if now - pending.sent_at > TOKEN_LIFETIME:
            raise ApplicationError(
                "This confirmation link has expired.",
                fields={"token": ["The link has expired: ask for a new one."]},
            )
        user.email = pending.address
        user.save(update_fields=["email"])
        pending.delete()
    return user.email


def email_address_remove(*, user: AnyUser) -> None:
    """Forget the account's address and any waiting one: no more e-mail until a new one is
    verified."""
    with transaction.atomic():
        EmailVerification.objects.filter(user_id=user.pk).delete()
        user.email = ""
        user.save(update_fields=["email"])
