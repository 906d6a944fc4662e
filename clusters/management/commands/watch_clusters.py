"""``manage.py watch_clusters``: follow every cluster's Volcano Jobs and pods until stopped.

Run one (or more, for availability: a per-(cluster, resource) lease keeps them from doubling
work) next to the Celery workers. SIGTERM or Ctrl-C stops it within a moment.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.demo import demo_cluster_wait
from clusters.watch import WatchSupervisor
from portal.health import heartbeat_touch

HEARTBEAT_SECONDS = 10.0


class Command(BaseCommand):
    help = "Watch every registered cluster's Volcano Jobs and pods and apply what changes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--refresh", type=float, default=15.0, help="seconds between cluster list checks"
        )
        parser.add_argument(
            "--demo-kubeconfig",
            help="(make demo) register the kubesim behind this kubeconfig first, as 'demo'",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def on_signal(signum: int, frame: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if options["demo_kubeconfig"]:
            cluster = demo_cluster_wait(Path(options["demo_kubeconfig"]))
            if cluster is None:
                raise CommandError("the demo kubesim did not come up")
            self.stdout.write(f"watch_clusters: demo cluster at {cluster.api_url}")
        supervisor = WatchSupervisor(stop=stop, refresh_seconds=options["refresh"])
        logging.getLogger(__name__).info("watching clusters as %s", supervisor.holder)
        self.stdout.write(f"watch_clusters: running as {supervisor.holder}")
        beating = threading.Thread(
            target=_heartbeat, args=(stop,), name="watch-heartbeat", daemon=True
        )
        beating.start()
        supervisor.run()
        self.stdout.write("watch_clusters: stopped")


def _heartbeat(stop: threading.Event) -> None:
    """Touch the heartbeat ``manage.py probe watcher`` reads, while the watcher runs."""
    while not stop.is_set():
        try:
            heartbeat_touch("watcher")
        except OSError:
            logging.getLogger(__name__).exception("watch_clusters: heartbeat not written")
        stop.wait(HEARTBEAT_SECONDS)
