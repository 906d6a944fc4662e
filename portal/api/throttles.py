"""Submit throttling per user (``GPUPOOL_SUBMIT_RATE``), shared by every web process through
the default cache (Redis in production), one round trip a submit.

DRF's ``UserRateThrottle`` keeps a list of the user's request times in the cache and writes it
back whole: two round trips a request, a list as long as the rate (600 timestamps pickled back
and forth at the default rate), and two requests at once both read the same list, so a burst
of parallel submits could pass the limit. Here each user has one counter per fixed window of
the rate's period, and a submit counts itself and reads the previous window's count in one
pipelined round trip (``INCR``, ``EXPIRE``, ``GET``). The limit applies to a sliding window
estimated from the two (the previous window's count weighted by how much of it the sliding
window still covers), so a client cannot send twice the rate across a window boundary. The
count is atomic: parallel submits each see the others'. A refused submit takes its count back.

While Redis does not answer, each process counts in its own memory (``portal.outages``: a
looser bound than a shared one, far better than refusing every submit or counting nothing).
The demo's local-memory cache counts through the cache API.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

log = logging.getLogger(__name__)

_local = LocMemCache("gpupool-submit-throttle", {"OPTIONS": {"MAX_ENTRIES": 10000}})
THROTTLE_KEY = "throttle:submit"
_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse_rate(rate: str) -> tuple[int, int]:
    """``"600/min"`` -> (600, 60): DRF's rate syntax, the period named by its first letter."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period[0]]


def _redis() -> Any | None:
    """The default cache's Redis client when it is django-redis's, else None."""
    client = getattr(cache, "client", None)
    get_client = getattr(client, "get_client", None)
    return get_client(write=True) if get_client is not None else None


def _count_in(store: Any, current: str, previous: str, ttl: int) -> tuple[int, int]:
    """Count one in ``current`` and read ``previous`` through a cache API (local memory)."""
    store.add(current, 0, timeout=ttl)
    return int(store.incr(current)), int(store.get(previous) or 0)


def _count(current: str, previous: str, ttl: int) -> tuple[int, int]:
    """(this window's count with this submit in it, the previous window's count)."""
    try:
        redis = _redis()
        if redis is None:
            return _count_in(cache, current, previous, ttl)
        pipe = redis.pipeline(transaction=False)
        pipe.incr(cache.make_key(current))
        pipe.expire(cache.make_key(current), ttl)
        pipe.get(cache.make_key(previous))
        now_count, _, before = pipe.execute()
        return int(now_count), int(before or 0)
    except Exception:
        log.warning("the cache does not answer: submits counted in this process only")
        return _count_in(_local, current, previous, ttl)


def _uncount(current: str) -> None:
    """Take a refused submit's count back (best effort: at worst it counts against the user)."""
    try:
        redis = _redis()
        if redis is None:
            cache.decr(current)
        else:
            redis.decr(cache.make_key(current))
    except Exception:
        with contextlib.suppress(ValueError):  # no local count to take back
            _local.decr(current)


class SubmitThrottle(BaseThrottle):
    """At most ``GPUPOOL_SUBMIT_RATE`` submits per user (per client address when anonymous),
    the form and the API together. The rate is read per request so settings overrides apply."""

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        rate = settings.GPUPOOL_SUBMIT_RATE
        if not rate:
            return True
        limit, period = _parse_rate(rate)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            who = f"user:{user.pk}"
        else:
            who = f"addr:{self.get_ident(request)}"
        now = time.time()
        window, into = divmod(now, period)
        current = f"{THROTTLE_KEY}:{who}:{int(window)}"
        previous = f"{THROTTLE_KEY}:{who}:{int(window) - 1}"
        mine, before = _count(current, previous, ttl=2 * period + 1)
        # The sliding window of one period that ends now still covers this share of the last.
        covered = 1.0 - into / period
        if before * covered + mine <= limit:
            return True
        _uncount(current)
        self._wait = self._wait_for(limit, period, into, mine - 1, before)
        return False

    @staticmethod
    def _wait_for(limit: int, period: int, into: float, counted: int, before: int) -> float:
        """Seconds until one more submit fits: ``before * (1 - t / period) + counted + 1 <=
        limit`` for ``t`` the time into this window, or, when this window alone is full, the
        same with this window's count fading through the next one."""
        if counted + 1 <= limit and before > 0:
            fits_at = period * (1.0 - (limit - counted - 1) / before)
        else:
            fits_at = period + period * (1.0 - (limit - 1) / max(counted, 1))
        return float(max(1, math.ceil(fits_at - into)))

    def wait(self) -> float | None:
        return self._wait
