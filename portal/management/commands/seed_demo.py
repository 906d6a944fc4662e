from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from portal.demo import DEMO_USERS, demo_seed


class Command(BaseCommand):
    help = "Create demo teams, users (known passwords, printed) and the GPU catalog."

    def handle(self, *args: Any, **options: Any) -> None:
        credentials = demo_seed()
        roles = {u: (staff, m) for u, staff, m in DEMO_USERS}
        self.stdout.write("Demo users (username / password):")
        for username, password in credentials:
            staff, memberships = roles[username]
            where = "platform admin" if staff else ", ".join(f"{r} of {t}" for t, r in memberships)
            self.stdout.write(f"  {username:<8} / {password}   ({where})")
