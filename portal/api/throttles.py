"""Submit throttling per user, counted in the default cache (Redis in production, so every
web worker shares the count). The rate is read per request so settings overrides apply."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import UserRateThrottle


class SubmitThrottle(UserRateThrottle):
    scope = "submit"

    def get_rate(self) -> str | None:
        return settings.GPUPOOL_SUBMIT_RATE
