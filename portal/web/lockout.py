"""The page a locked-out login gets (django-axes' ``AXES_LOCKOUT_CALLABLE``).

One answer for the portal's login and the admin's: 429 with ``Retry-After``, in words that say
what happened and what to do, and that never tell whether the account exists.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def login_locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """429: too many failed logins for this account or from this address."""
    minutes = settings.GPUPOOL_LOGIN_LOCKOUT_MINUTES
    response = render(
        request,
        "auth/locked.html",
        {"minutes": minutes, "failure_limit": settings.AXES_FAILURE_LIMIT},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response
