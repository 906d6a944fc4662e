"""Personal API tokens: random, shown once, stored as a SHA-256 digest, with an expiry.

A token reads ``gpp_<8 lookup chars><43 secret chars>``. The first 12 characters are stored
in clear to find the row; the digest of the whole token is compared in constant time. SHA-256
(not a slow password hash) is right here: the secret has 256 bits of entropy, so there is
nothing to brute-force, and every API request pays the check.

A token that authenticated is remembered in the process for ``GPUPOOL_API_TOKEN_CACHE_SECONDS``
(default 5; 0 turns it off): a script's next requests then cost no look-up query. Its expiry is
still checked on every request; a revocation or a user's deactivation made in this process
applies at once (the cache is emptied), one made in another process within those seconds
(``docs/decisions.md``, *API tokens remembered for seconds*).
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import hmac
import secrets
import threading
import time
from copy import copy
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
    digest = _digest(raw)
    now = now or timezone.now()
    token = _remembered(digest, now)
    if token is None:
        token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
        if token is None:
            return TokenCheck(None, TokenRefusal.UNKNOWN)
        if not hmac.compare_digest(token.digest, digest):
            return TokenCheck(None, TokenRefusal.WRONG_SECRET, prefix)
        if token.revoked_at is not None or token.expires_at <= now or not token.user.is_active:
            return TokenCheck(None, TokenRefusal.NOT_LIVE, prefix)
        _remember(digest, token)
    # Record use at most once a minute: a busy client should not turn reads into writes.
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        _remember(digest, token, last_used_at=now)
    return TokenCheck(_fresh_copy(token), prefix=prefix)


# digest -> (monotonic time it is forgotten at, the token as loaded with its user)
_live: dict[str, tuple[float, ApiToken]] = {}
_live_lock = threading.Lock()
_LIVE_MAX = 4096


def _remember(digest: str, token: ApiToken, *, last_used_at: dt.datetime | None = None) -> None:
    """Keep a live token for the next requests; the copy kept carries no per-request caches."""
    seconds = settings.GPUPOOL_API_TOKEN_CACHE_SECONDS
    if seconds <= 0:
        return
    kept = _fresh_copy(token)
    if last_used_at is not None:
        kept.last_used_at = last_used_at
    with _live_lock:
        if len(_live) >= _LIVE_MAX:
            _live.clear()  # a bound, not a policy: thousands of live scripts in one process
        _live[digest] = (time.monotonic() + seconds, kept)


def _remembered(digest: str, now: dt.datetime) -> ApiToken | None:
    """The live token remembered for ``digest``, unless forgotten since or expired now."""
    entry = _live.get(digest)
    if entry is None:
        return None
    until, token = entry
    if time.monotonic() >= until or token.expires_at <= now:
        _live.pop(digest, None)
        return None
    return token


def _fresh_copy(token: ApiToken) -> ApiToken:
    """A copy of ``token`` and of its user for one request: what a request caches on them
    (permissions, a view's attributes) stays with that request."""
    fresh = copy(token)
    fresh.user = copy(token.user)
    return fresh


def api_tokens_forget() -> None:
    """Forget every remembered token: a token or a user changed in this process."""
    with _live_lock:
        _live.clear()


def api_token_authenticate(raw: str, *, now: dt.datetime | None = None) -> ApiToken | None:
    """The live token matching ``raw``, or None (unknown, expired, revoked, inactive user)."""
    return api_token_check(raw, now=now).token


def api_token_revoke(*, token: ApiToken, now: dt.datetime | None = None) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
    api_tokens_forget()
