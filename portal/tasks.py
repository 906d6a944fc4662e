"""Housekeeping tasks of the portal app (thin; logic in services)."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.utils import timezone

from portal.models import ApiToken


@shared_task(name="portal.prune_api_tokens")
def prune_api_tokens() -> int:
    """Delete tokens that expired or were revoked more than 30 days ago."""
    cutoff = timezone.now() - dt.timedelta(days=30)
    expired = ApiToken.objects.filter(expires_at__lt=cutoff)
    revoked = ApiToken.objects.filter(revoked_at__lt=cutoff)
    deleted, _ = (expired | revoked).delete()
    return deleted
