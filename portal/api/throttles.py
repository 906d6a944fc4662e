"""Submit throttling per user, counted in the default cache (Redis in production, so every
web worker shares the count). The rate is read per request so settings overrides apply."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import UserRateThrottle

from portal.outages import FallbackCache


class SubmitThrottle(UserRateThrottle):
    scope = "submit"
    cache = FallbackCache()  # counts in this process while Redis is down

    def get_rate(self) -> str | None:
        return settings.GPUPOOL_SUBMIT_RATE
