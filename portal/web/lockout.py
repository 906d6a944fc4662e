"""The login lockout's key and answer (django-axes' ``AXES_USERNAME_CALLABLE`` and
``AXES_LOCKOUT_CALLABLE``).

One key per account: ``LARS``, ``lars`` and `` Lars `` are one directory entry to LDAP (its
names match without regard to case or surrounding space) and one account to the portal, so
they share one count of failures. Each address has its own count besides.

One answer for the portal's login and the admin's: 429 with ``Retry-After``, in words that say
what happened and what to do, and that never tell whether the account exists.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def login_name_key(name: object) -> str:
    """The name a login is counted under: Unicode-normalised (NFKC), case-folded, inner runs
    of white space made one, as an LDAP directory compares ``uid`` values."""
    return " ".join(unicodedata.normalize("NFKC", str(name or "")).casefold().split())


def login_key(request: HttpRequest | None, credentials: dict[str, Any] | None) -> str:
    """django-axes' username for a login attempt: the folded name it was made under."""
    field = settings.AXES_USERNAME_FORM_FIELD
    if credentials and credentials.get(field) is not None:
        return login_name_key(credentials.get(field))
    data = getattr(request, "data", None) or getattr(request, "POST", {})
    return login_name_key(data.get(field, ""))


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
