"""Which Celery worker process is alive: a name per worker start, and a beat every second.

A worker's name (host, pid, a random suffix: a restarted worker is a new one) is fixed when
the worker starts (``worker_init``, before a prefork pool forks, so its children share it).
A thread of the worker's main process writes a :class:`~portal.models.WorkerBeat` row every
second; a worker stopped cleanly deletes it, a killed one just stops beating. Outside a worker
(a test, a management command) :func:`worker_name` is empty: nothing there is anyone's.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import uuid

from django.db import close_old_connections, connection
from django.utils import timezone

log = logging.getLogger(__name__)

__all__ = [
    "BEAT_SECONDS",
    "DEAD_AFTER",
    "live_workers",
    "worker_beats_start",
    "worker_beats_stop",
    "worker_concurrency",
    "worker_name",
    "worker_name_set",
]

BEAT_SECONDS = 1.0
# A worker that has not beaten for this long is dead (or so starved that a second attempt
# beside its own is the lesser evil: a duplicated dispatch only adopts what the first made).
DEAD_AFTER = dt.timedelta(seconds=5)

_name = ""
_concurrency = 0
_stop = threading.Event()
_thread: threading.Thread | None = None


def worker_name() -> str:
    return _name


def worker_concurrency() -> int:
    """How many tasks this worker runs at once (0 outside a worker)."""
    return _concurrency


def worker_name_set(hostname: str = "", concurrency: int = 0) -> str:
    global _name, _concurrency
    _name = f"{hostname or socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"[:200]
    _concurrency = concurrency
    return _name


def _beat() -> None:
    """One UPDATE a second per worker (``update_or_create`` cost a transaction, a locking
    SELECT and the UPDATE); the row is inserted by the first beat, or again if the re-drive
    swept it while this worker was starved."""
    from portal.models import WorkerBeat

    now = timezone.now()
    if not WorkerBeat.objects.filter(name=_name).update(seen_at=now):
        WorkerBeat.objects.bulk_create(
            [WorkerBeat(name=_name, seen_at=now)],
            update_conflicts=True,
            unique_fields=["name"],
            update_fields=["seen_at"],
        )


def _run() -> None:
    while not _stop.is_set():
        try:
            _beat()
        except Exception:  # the database is restarting: beat again when it is back
            log.debug("worker beat failed", exc_info=True)
            close_old_connections()
        _stop.wait(BEAT_SECONDS)
    connection.close()


def worker_beats_start() -> None:
    """Start beating (in the worker's main process, once it is ready)."""
    global _thread
    if not _name:
        worker_name_set()
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_run, name="worker-beat", daemon=True)
    _thread.start()


def worker_beats_stop() -> None:
    """A clean stop: the row goes at once, so nothing waits for this worker."""
    from portal.models import WorkerBeat

    _stop.set()
    if _thread is not None:
        _thread.join(timeout=5)
    try:
        WorkerBeat.objects.filter(name=_name).delete()
        connection.close()
    except Exception:
        log.debug("could not remove the worker beat", exc_info=True)


def live_workers(*, now: dt.datetime | None = None) -> set[str]:
    """Names of the workers that beat recently."""
    from portal.models import WorkerBeat

    now = now or timezone.now()
    return set(
        WorkerBeat.objects.filter(seen_at__gte=now - DEAD_AFTER).values_list("name", flat=True)
    )
