"""``Authorization: Bearer gpp_…`` for scripts; the browser uses the session (CSRF enforced).

Failed token attempts are limited, ``GPUPOOL_API_AUTH_FAILURE_RATE`` per period, on two
counters kept apart in the cache: one per client address (``portal.proxies.client_address``)
and one per token lookup prefix (a stored token's first 12 characters). Past either, a *failed*
attempt is answered 429 with ``Retry-After``, naming the limit (your address, or this token).

A valid token is never refused by the limit, whatever its address or prefix has seen: the
secret has 256 bits, so no one guesses it, and the limit is there to bound the noise of
scanning and misconfigured scripts, not to stand between a token and its owner. Otherwise one
caller behind a shared NAT, or anyone who has seen a token's prefix (it is shown in clear),
could lock everyone else out. The counters are therefore read only when an attempt has failed:
a valid token costs its one look-up query and no cache round trip.

What is counted where:

- malformed, or no stored token has the prefix: the address only (a prefix key is made only
  for prefixes that exist, so a scan cannot fill the cache with keys);
- a stored token's prefix with a wrong secret: the address and that prefix;
- the right secret of an expired or revoked token (or an inactive user's): nothing; it is no
  guess, and the 401 says what is wrong.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.proxies import client_address
from portal.tokens import TokenRefusal, api_token_check

log = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FAILURES_KEY = "apitoken-failures"


def _failure_rate() -> tuple[int, int]:
    """(failures allowed, period in seconds) from ``GPUPOOL_API_AUTH_FAILURE_RATE``."""
    count, _, period = settings.GPUPOOL_API_AUTH_FAILURE_RATE.partition("/")
    return int(count), _PERIODS[period[0]]


def _window_key(kind: str, name: str, now: float, period: int) -> str:
    """The counter of ``kind`` (``address`` or ``token``) for ``name`` in this fixed period."""
    return f"{FAILURES_KEY}:{kind}:{name}:{int(now // period)}"


@dataclass(frozen=True)
class TokenFailureLimit:
    """A failed attempt past the limit: the seconds until the period ends, and which limits
    it is past (``address``, ``token`` or both)."""

    wait: int
    over: tuple[str, ...]

    @property
    def message(self) -> str:
        if self.over == ("token",):
            return "Too many failed attempts with this API token."
        if self.over == ("address",):
            return "Too many failed API token attempts from your address."
        return "Too many failed API token attempts from your address and with this API token."


def _count(key: str, period: int) -> int:
    cache.add(key, 0, timeout=period + 1)
    return int(cache.incr(key))


def token_failure_record(
    address: str, prefix: str = "", now: float | None = None
) -> TokenFailureLimit | None:
    """Count one failed token attempt from ``address`` (and against ``prefix``, a stored
    token's lookup prefix, when given) in the current period; the limit it is past, if any.

    Counting is the check (``incr`` returns the count), so a failure costs two cache round
    trips per counter and no read before. A cache that cannot be reached does not lock anyone
    out: the attempt is answered as a plain failure (and logged).
    """
    limit, period = _failure_rate()
    now = time.time() if now is None else now
    over: list[str] = []
    try:
        if _count(_window_key("address", address, now, period), period) > limit:
            over.append("address")
        if prefix:
            failures = _count(_window_key("token", prefix, now, period), period)
            if failures > limit:
                over.append("token")
            if failures == limit + 1:  # once a period: someone is trying this token hard
                log.warning(
                    "API token %s…: more than %d failed attempts this period, the latest from "
                    "%s; wrong secrets for it get 429 until the period ends, the token itself "
                    "still works",
                    prefix,
                    limit,
                    address,
                )
    except Exception:  # a cache outage must not turn every token request into an error
        log.warning("API token failure not counted; not limiting", exc_info=True)
        return None
    if not over:
        return None
    return TokenFailureLimit(wait=max(1, int(period - now % period)), over=tuple(over))


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() not in {"bearer", "token"}:
            return None
        check = api_token_check(raw.strip())
        if check.token is not None:  # the success path touches no counter
            return check.token.user, check.token
        if check.refusal is not TokenRefusal.NOT_LIVE:
            counted = check.prefix if check.refusal is TokenRefusal.WRONG_SECRET else ""
            limited = token_failure_record(client_address(request), counted)
            if limited is not None:
                raise exceptions.Throttled(wait=limited.wait, detail=limited.message)
        raise exceptions.AuthenticationFailed("Invalid, expired or revoked API token.")

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the bearer token in the OpenAPI schema."""

    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (create one on /tokens/ or with "
            "`manage.py create_api_token`).",
        }
