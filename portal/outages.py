"""What a request gets while PostgreSQL or Redis is down: "try again shortly", never a 500.

PostgreSQL holds everything a request needs, so while it is down (a restart, a failover)
nothing can be answered: the API says so with a JSON 503 and ``Retry-After``, pages with a
short "try again" page. Redis only carries hints (submit throttle counts, cycle triggers,
cached dashboard figures, the broker's "look at job X"), and the job table is the outbox, so
while Redis is down requests go on: the cache answers "nothing stored" (django-redis's
``IGNORE_EXCEPTIONS``, set in settings), the submit throttle counts in this process's memory
(:class:`FallbackCache`), and a submit commits and answers 201 while its cycle trigger is
dropped (beat's next cycle admits the job). Any outage error that still escapes a view (or a
middleware) is answered like a database outage.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

__all__ = ["RETRY_AFTER_SECONDS", "FallbackCache", "OutageMiddleware", "outage_error"]

RETRY_AFTER_SECONDS = 5


def _outage_types() -> tuple[type[BaseException], ...]:
    """Errors that mean "a backing service is unreachable or restarting", not "a bug"."""
    types: list[type[BaseException]] = [OperationalError, InterfaceError]
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        types += [RedisConnectionError, RedisTimeoutError]
    except ImportError:  # pragma: no cover - redis is a dependency
        pass
    try:
        from django_redis.exceptions import ConnectionInterrupted

        types.append(ConnectionInterrupted)
    except ImportError:  # pragma: no cover
        pass
    try:
        from kombu.exceptions import OperationalError as BrokerError

        types.append(BrokerError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


OUTAGE_ERRORS = _outage_types()


def outage_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) says a backing service is down."""
    while exc is not None:
        if isinstance(exc, OUTAGE_ERRORS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def outage_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: the API's JSON error shape, or a page that reads no database."""
    wait = RETRY_AFTER_SECONDS
    if request.path.startswith("/api/"):
        message = (
            f"The service is briefly unavailable (its database or message broker is "
            f"restarting); nothing was changed by this request. Try again in {wait} s."
        )
        response: HttpResponse = JsonResponse(
            {"message": message, "extra": {"fields": {}}}, status=503
        )
    else:
        # No request context: the context processors would read the user, i.e. the database.
        response = HttpResponse(
            render_to_string("outage.html", {"wait": wait}),
            status=503,
        )
    response["Retry-After"] = str(wait)
    response["Cache-Control"] = "no-store"
    return response


def _remember(sender: Any, request: HttpRequest | None = None, **_: Any) -> None:
    """Note on the request that its 500 comes from an outage (Django calls this while the
    exception is being handled, before it renders the 500 page)."""
    if request is not None and outage_error(sys.exc_info()[1]):
        request.gpupool_outage = True  # type: ignore[attr-defined]


got_request_exception.connect(_remember, dispatch_uid="gpupool-outage")


class OutageMiddleware:
    """Answer 503 "try again" instead of 500 when PostgreSQL or Redis is unreachable.

    ``process_exception`` catches what a view raises; an error raised in another middleware
    (a session saved on the way out) reaches Django's 500 handler instead, and is swapped for
    the same answer on its way out through this, the outermost, middleware.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, "gpupool_outage", False):
            return outage_response(request)
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not outage_error(exc):
            return None
        log.warning("503 for %s %s: %s", request.method, request.path, _first_line(exc))
        return outage_response(request)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


_MISSING = object()


class FallbackCache:
    """The default cache, and a copy in this process's memory for when it does not answer.

    For counts that must keep working through a Redis outage (the submit throttle): every
    value is written to both; a read takes the shared value, or this process's copy when the
    shared cache has none (Redis down, or restarted empty). A count kept per process for a
    minute is a looser bound than a shared one, and far better than refusing every request or
    counting nothing.
    """

    def __init__(self) -> None:
        self.local = LocMemCache("gpupool-outage-fallback", {"OPTIONS": {"MAX_ENTRIES": 10000}})

    def get(self, key: str, default: Any = None) -> Any:
        try:
            value = cache.get(key, _MISSING)
        except Exception:  # without IGNORE_EXCEPTIONS, the error itself
            value = _MISSING
        return self.local.get(key, default) if value is _MISSING else value

    def set(self, key: str, value: Any, timeout: float | None = None) -> None:
        self.local.set(key, value, timeout)
        try:
            cache.set(key, value, timeout)
        except Exception:
            log.warning("the cache does not answer: %s counted in this process only", key)
