"""Celery tasks for the directory syncs: LDAP (beat runs it every ``GPUPOOL_LDAP_SYNC_INTERVAL``
seconds) and OpenID Connect (every ``GPUPOOL_OIDC_SYNC_INTERVAL`` seconds)."""

from __future__ import annotations

from celery import shared_task

from identity.ldap_sync import ldap_sync
from identity.oidc_sync import oidc_sync


@shared_task(name="identity.ldap_sync")
def ldap_sync_task() -> dict[str, int]:
    return ldap_sync()


@shared_task(name="identity.oidc_sync")
def oidc_sync_task() -> dict[str, int]:
    return oidc_sync()
