from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dashboards.demo import HISTORY_DAYS, demo_history_seed


class Command(BaseCommand):
    help = "Give the demo a week of finished jobs, usage and series (once; after seed_demo)."

    def handle(self, *args: Any, **options: Any) -> None:
        n = demo_history_seed()
        if n:
            self.stdout.write(f"Demo history: {n} finished jobs over the last {HISTORY_DAYS} days")
