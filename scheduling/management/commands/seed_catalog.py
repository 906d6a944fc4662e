from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from scheduling.catalog import catalog_seed


class Command(BaseCommand):
    help = "Create the GPU model catalog from gpu-models.csv (existing entries are kept)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--csv", default=settings.GPUPOOL_GPU_CATALOG_CSV)
        parser.add_argument("--update", action="store_true", help="Also overwrite existing rows")

    def handle(self, *args: Any, **options: Any) -> None:
        created, updated = catalog_seed(path=options["csv"], update_existing=options["update"])
        self.stdout.write(f"GPU catalog: {created} created, {updated} updated.")
