"""``manage.py rotate_cluster_keys``: re-encrypt every cluster's credentials with the current key.

Put the new key first in ``GPUPOOL_SECRET_KEYS`` (keep the old one after it), run this, then
drop the old key. A row no configured key opens is reported and left as it is.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from clusters.clients import clusters_forget_clients
from clusters.models import Cluster
from clusters.secrets import CredentialsUnreadable, credentials_reseal


class Command(BaseCommand):
    help = "Re-encrypt stored cluster credentials under the first key of GPUPOOL_SECRET_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        done, failed = 0, []
        with transaction.atomic():
            for cluster in Cluster.objects.select_for_update().exclude(credentials=""):
                try:
                    cluster.credentials = credentials_reseal(cluster.credentials)
                except CredentialsUnreadable:
                    failed.append(cluster.name)
                    continue
                cluster.save(update_fields=["credentials"])
                done += 1
        clusters_forget_clients()
        self.stdout.write(f"re-encrypted the credentials of {done} cluster(s)")
        if failed:
            raise CommandError(
                "no configured key opens the credentials of: "
                + ", ".join(failed)
                + " (restore the old key, or register these clusters again)"
            )
