"""Run the OpenID Connect sync once now (beat runs it every GPUPOOL_OIDC_SYNC_INTERVAL seconds)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from identity.oidc_sync import oidc_sync


class Command(BaseCommand):
    help = (
        "Trade every OpenID Connect account's refresh token now: re-apply its groups; disable "
        "accounts the provider refuses (deleted, disabled, consent revoked)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = oidc_sync()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in counts.items()))
