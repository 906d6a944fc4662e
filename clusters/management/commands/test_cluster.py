"""``manage.py test_cluster NAME``: connect and report, in words, what works and what does not."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters import selectors
from clusters.connection_test import cluster_test


class Command(BaseCommand):
    help = "Test the connection to a registered cluster; exits non-zero when something is wrong."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = selectors.cluster_get(name=options["name"])
        if cluster is None:
            raise CommandError(f"no cluster named {options['name']!r}")
        report = cluster_test(cluster=cluster)
        for check in report.checks:
            mark = "ok  " if check.ok else "FAIL"
            self.stdout.write(f"  {mark} {check.name}: {check.message}")
        if not report.ok:
            raise CommandError(report.summary)
        self.stdout.write(self.style.SUCCESS(report.summary))
