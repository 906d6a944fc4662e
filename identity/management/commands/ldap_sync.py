"""Run the LDAP sync once now (beat runs it every GPUPOOL_LDAP_SYNC_INTERVAL seconds)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from identity.ldap_sync import ldap_sync


class Command(BaseCommand):
    help = "Re-read every LDAP account's groups now; disable accounts the directory lost."

    def handle(self, *args: Any, **options: Any) -> None:
        counts = ldap_sync()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in counts.items()))
