"""``manage.py sync_cluster [NAME …]``: read inventories, sync queues, reconcile, now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from clusters.inventory import inventory_sync
from clusters.models import Cluster
from clusters.queues import queues_sync
from clusters.tasks import cluster_reconcile_and_enqueue


class Command(BaseCommand):
    help = (
        "Read the GPU inventory, sync the team queues and reconcile job status (in this process)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="clusters (default: all)")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.all()
        if options["names"]:
            clusters = clusters.filter(name__in=options["names"])
        for cluster in clusters:
            self.stdout.write(
                f"{cluster.name}: inventory: {inventory_sync(cluster=cluster).message}"
            )
            self.stdout.write(f"{cluster.name}: queues: {queues_sync(cluster=cluster).message}")
            self.stdout.write(
                f"{cluster.name}: status: {cluster_reconcile_and_enqueue(cluster=cluster).message}"
            )
