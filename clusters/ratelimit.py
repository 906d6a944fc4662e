"""How fast the portal may talk to one cluster: a request rate and a bound on creates in flight.

The official Python client has no client-side limiter at all (client-go's famous default of
5 requests/s with a burst of 10 does not exist here), so without one a burst of admissions
would hit the API server as fast as the workers can send. Two pieces:

* :class:`SharedRateLimiter` counts requests per cluster in fixed windows of about 100 ms
  (longer under 10 requests/s, so that each window holds a whole number of requests) in the
  default cache. With Redis (production) that is one budget shared by every worker process;
  with the local-memory cache (the demo) each process has its own. When a window is full the
  caller sleeps until the next one. A broken cache never blocks a request: limiting is a
  courtesy to the API server, not a correctness rule.
* ``creates_in_flight`` is a semaphore per process (see :class:`clusters.kube.KubeClient`),
  since a crashed worker could never give back a shared one.
* :func:`cluster_task_slot` bounds the tasks one worker runs for one cluster at once (half its
  slots by default), so a cluster that hangs holds at most that many while its requests time
  out, and the scheduling cycle and the other clusters' tasks keep the rest.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from django.conf import settings
from django.core.cache import cache

from portal.workers import worker_concurrency, worker_name

log = logging.getLogger(__name__)

WINDOW_SECONDS = 0.1


class SharedRateLimiter:
    """At most ``rate`` requests per second to one cluster, counted in the shared cache.

    Each process takes its slots from the shared window a few at a time (one cache round
    trip for several requests, which matters at hundreds of creates per second) and hands them
    out locally. Slots are only good in the window they were counted in: an unused one is
    lost with its window, so the limit can be under-used a little, never exceeded.
    """

    def __init__(self, key: str, rate: float) -> None:
        self.key = f"clusters:rate:{key}"
        # Whole requests per window, and the window stretched to match: 4/s is one request
        # per 250 ms, 15/s two per 133 ms. Rounding slots in a fixed window would turn 4/s
        # into 10/s.
        self.per_window = max(1, math.ceil(rate * WINDOW_SECONDS - 1e-9))
        self.window_seconds = self.per_window / rate
        self.chunk = max(1, -(-self.per_window // 4))
        self._local = threading.Lock()
        self._window = -1
        self._slots = 0

    def acquire(self) -> float:
        """Wait for a slot; returns the seconds waited."""
        waited = 0.0
        while True:
            now = time.time()
            window = int(now / self.window_seconds)
            with self._local:
                if self._window == window and self._slots > 0:
                    self._slots -= 1
                    return waited
                try:
                    granted = self._take(window)
                except Exception:  # cache down or evicted between add and incr: do not block
                    log.debug("rate limiter cache unavailable; not limiting", exc_info=True)
                    return waited
                if granted:
                    self._window, self._slots = window, granted - 1
                    return waited
            pause = (window + 1) * self.window_seconds - now + 0.001
            time.sleep(pause)
            waited += pause

    def _take(self, window: int) -> int:
        """Count up to ``chunk`` slots of ``window`` in the cache; how many were free."""
        slot = f"{self.key}:{window}"
        cache.add(slot, 0, timeout=2)
        count = cache.incr(slot, self.chunk)
        return max(0, min(self.chunk, self.per_window - (count - self.chunk)))


# A count left behind by a killed worker runs out with its key: at most this long.
SLOT_COUNT_TTL = 60


def cluster_task_slots() -> int:
    """Tasks one worker may run for one cluster at once: the setting, or half its slots."""
    return settings.GPUPOOL_CLUSTER_TASK_SLOTS or max(1, worker_concurrency() // 2)


@contextmanager
def cluster_task_slot(cluster_id: int) -> Iterator[bool]:
    """Take one of this worker's places for ``cluster_id`` (True), or learn that they are all
    taken (False: the caller defers instead of waiting on a slow cluster in a worker slot).

    Counted in the shared cache per worker (a prefork pool's children share one count);
    outside a worker, or with the cache down, there is no bound.
    """
    name = worker_name()
    if not name:
        yield True
        return
    key = f"clusters:busy:{cluster_id}:{name}"
    try:
        cache.add(key, 0, timeout=SLOT_COUNT_TTL)
        taken = int(cache.incr(key))
    except Exception:  # cache down or the key expired between add and incr: do not bound
        yield True
        return
    try:
        yield taken <= cluster_task_slots()
    finally:
        with suppress(Exception):  # gone with its key (a count left by a killed worker)
            cache.decr(key)
