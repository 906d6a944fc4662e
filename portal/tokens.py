"""Personal API tokens: random, shown once, stored as a SHA-256 digest, with an expiry.

A token reads ``gpp_<8 lookup chars><43 secret chars>``. The first 12 characters are stored
in clear to find the row; the digest of the whole token is compared in constant time. SHA-256
(not a slow password hash) is right here: the secret has 256 bits of entropy, so there is
nothing to brute-force, and every API request pays the check.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from portal.models import ApiToken

TOKEN_PREFIX = "gpp_"
_LOOKUP_LEN = len(TOKEN_PREFIX) + 8


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(
    *, user: AbstractBaseUser, name: str, days: int | None = None, now: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the plaintext, which is never stored or shown again."""
    now = now or timezone.now()
    raw = TOKEN_PREFIX + secrets.token_urlsafe(6)[:8].ljust(8, "x") + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:100] or "token",
        prefix=raw[:_LOOKUP_LEN],
        digest=_digest(raw),
        expires_at=now + dt.timedelta(days=days or settings.GPUPOOL_API_TOKEN_DAYS),
    )
    return token, raw


class TokenRefusal(enum.Enum):
    """Why a presented token was refused, as far as the failure limit needs to know."""

    UNKNOWN = "unknown"
    """Malformed, or no stored token has its lookup prefix: counts against the address only."""
    WRONG_SECRET = "wrong secret"
    """A stored token's lookup prefix with another secret: counts against that prefix too."""
    NOT_LIVE = "not live"
    """The right secret of a token that expired or was revoked, or whose user is inactive:
    whoever sends it holds the whole secret, so it is no guess and is not counted."""


@dataclass(frozen=True)
class TokenCheck:
    """What a presented token turned out to be: ``token`` when it authenticates, else
    ``refusal``; ``prefix`` is the lookup prefix when a stored token has it."""

    token: ApiToken | None
    refusal: TokenRefusal | None = None
    prefix: str = ""


def api_token_check(raw: str, *, now: dt.datetime | None = None) -> TokenCheck:
    """Look ``raw`` up (one query, by its lookup prefix) and say what it is.

    The failure limit (``portal.api.auth``) needs more than yes or no: a wrong secret for a
    prefix that exists is counted against that prefix, an unknown prefix only against the
    caller's address.
    """
    if not raw.startswith(TOKEN_PREFIX) or len(raw) < _LOOKUP_LEN + 16:
        return TokenCheck(None, TokenRefusal.UNKNOWN)
    prefix = raw[:_LOOKUP_LEN]
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None:
        return TokenCheck(None, TokenRefusal.UNKNOWN)
    if not hmac.compare_digest(token.digest, _digest(raw)):
        return TokenCheck(None, TokenRefusal.WRONG_SECRET, prefix)
    now = now or timezone.now()
    if token.revoked_at is not None or token.expires_at <= now or not token.user.is_active:
        return TokenCheck(None, TokenRefusal.NOT_LIVE, prefix)
    # Record use at most once a minute: a busy client should not turn reads into writes.
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return TokenCheck(token, prefix=prefix)


def api_token_authenticate(raw: str, *, now: dt.datetime | None = None) -> ApiToken | None:
    """The live token matching ``raw``, or None (unknown, expired, revoked, inactive user)."""
    return api_token_check(raw, now=now).token


def api_token_revoke(*, token: ApiToken, now: dt.datetime | None = None) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
