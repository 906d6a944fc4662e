from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from portal.demo import demo_seed, demo_user_roles


class Command(BaseCommand):
    help = "Create demo teams, users (known passwords, printed) and the GPU catalog."

    def handle(self, *args: Any, **options: Any) -> None:
        credentials = dict(demo_seed())
        self.stdout.write("Demo users (username / password):")
        for username, where in demo_user_roles():
            self.stdout.write(f"  {username:<8} / {credentials[username]}   ({where})")
