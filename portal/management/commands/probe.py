"""``manage.py probe web|worker|beat|watcher``: readiness of a process, for exec probes.

Exit status 0 when the process may take work, 1 otherwise, with one line per check. The
checks are those of ``/readyz`` (``portal.health``) that the process needs, plus its own sign
of life: a worker's beat row, the watcher's heartbeat file. Kubernetes runs it as the
readiness (and, for processes without HTTP, liveness) probe; docker-compose as healthcheck.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.health import process_alive, readiness

# What each process needs to do its work.
NEEDS: dict[str, tuple[str, ...]] = {
    "web": ("database", "broker", "cache"),
    "worker": ("database", "broker", "cache"),
    "beat": ("broker",),
    "watcher": ("database",),
}
# Seconds without a sign of life after which a process is not alive.
ALIVE_WITHIN = {"worker": 30.0, "watcher": 60.0}


class Command(BaseCommand):
    help = "Check that this process's database, broker, cache and own heartbeat are fine."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("process", choices=sorted(NEEDS))
        parser.add_argument(
            "--node",
            default="",
            help="worker: its node name (-n, e.g. celery@host) where several share a host; "
            "default: any worker on this host",
        )
        parser.add_argument(
            "--alive-only",
            action="store_true",
            help="only the process's own sign of life (a liveness probe: never fail it "
            "because PostgreSQL or Redis is down, or every pod restarts at once)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        process = options["process"]
        checks = {} if options["alive_only"] else readiness(NEEDS[process])
        if process in ALIVE_WITHIN:
            try:
                checks["alive"] = process_alive(
                    process, max_age_seconds=ALIVE_WITHIN[process], node=options["node"]
                )
            except Exception as exc:  # the worker's beat is read from the database
                checks["alive"] = f"unknown ({type(exc).__name__})"
        for name, result in checks.items():
            self.stdout.write(f"{name}: {result}")
        failed = [name for name, result in checks.items() if result != "ok"]
        if failed:
            raise CommandError(f"{process} not ready: {', '.join(failed)}")
