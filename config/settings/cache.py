"""The cache: local memory for the demo; Redis in production, so throttles and cycle triggers
are shared by every process."""

from __future__ import annotations

import os

from config.settings.environment import env

# ---------------------------------------------------------------------------------------------
# Cache: local memory by default; Redis in production so throttles are shared by all workers
# ---------------------------------------------------------------------------------------------
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://gpupool")}
# Parallel test workers share one Redis: keep their keys apart.
CACHES["default"]["KEY_PREFIX"] = env.str("CACHE_KEY_PREFIX", default="gpupool") + os.environ.get(
    "PYTEST_XDIST_WORKER", ""
)
if CACHES["default"]["BACKEND"].startswith("django_redis."):
    # Everything cached is a hint (throttle counts, cycle triggers, dashboard figures): while
    # Redis is down the cache answers "nothing stored" within a second instead of failing the
    # request (portal/outages.py), and requests go on.
    CACHES["default"].setdefault("OPTIONS", {}).update(
        {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1}
    )
    DJANGO_REDIS_IGNORE_EXCEPTIONS = True
    DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = False
