"""``Authorization: Bearer gpp_…`` for scripts; the browser uses the session (CSRF enforced).

Failed token attempts are counted per client address (``portal.proxies.client_address``) in
the cache; past ``GPUPOOL_API_AUTH_FAILURE_RATE`` every token attempt from that address is a
429 with ``Retry-After`` until the period ends, before the token is even looked up. A valid
token from a blocked address waits too: the limit bounds what guessing costs the database.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.proxies import client_address
from portal.tokens import api_token_authenticate

log = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FAILURES_KEY = "apitoken-failures"


def _failure_rate() -> tuple[int, int]:
    """(failures allowed, period in seconds) from ``GPUPOOL_API_AUTH_FAILURE_RATE``."""
    count, _, period = settings.GPUPOOL_API_AUTH_FAILURE_RATE.partition("/")
    return int(count), _PERIODS[period[0]]


def _window_key(address: str, now: float, period: int) -> str:
    return f"{FAILURES_KEY}:{address}:{int(now // period)}"


def token_failures_wait(address: str, now: float | None = None) -> int | None:
    """Seconds until ``address`` may try a token again, or None when it may now.

    A cache that cannot be reached does not lock everyone out: the check is skipped (and
    logged), as the submit throttle's outage is handled elsewhere.
    """
    limit, period = _failure_rate()
    now = time.time() if now is None else now
    try:
        failures = cache.get(_window_key(address, now, period), 0)
    except Exception:  # a cache outage must not turn every token request into an error
        log.warning("API token failure count unavailable; not limiting", exc_info=True)
        return None
    if failures < limit:
        return None
    return max(1, int(period - now % period))


def token_failure_record(address: str, now: float | None = None) -> None:
    """Count one failed token attempt from ``address`` in the current period."""
    _, period = _failure_rate()
    now = time.time() if now is None else now
    key = _window_key(address, now, period)
    try:
        cache.add(key, 0, timeout=period + 1)
        cache.incr(key)
    except Exception:  # as above: counting is best effort when the cache is away
        log.warning("API token failure not counted", exc_info=True)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() not in {"bearer", "token"}:
            return None
        address = client_address(request)
        wait = token_failures_wait(address)
        if wait is not None:
            raise exceptions.Throttled(
                wait=wait, detail="Too many failed API token attempts from your address."
            )
        token = api_token_authenticate(raw.strip())
        if token is None:
            token_failure_record(address)
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API token.")
        return token.user, token

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
