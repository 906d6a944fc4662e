from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.tokens import api_token_create


class Command(BaseCommand):
    help = "Create a personal API token for USERNAME and print it (it is shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--days", type=int, default=None, help="Lifetime (default setting)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}.")
        if options["days"] is not None and options["days"] < 1:
            raise CommandError("--days must be at least 1.")
        _token, raw = api_token_create(user=user, name=options["name"], days=options["days"])
        self.stdout.write(raw)
