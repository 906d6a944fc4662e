"""The Celery application: configured from Django settings (``CELERY_*``)."""

import logging.config
import os
from typing import Any

from celery import Celery, signals
from django.conf import settings
from django.db import close_old_connections

from portal.logs import log_context, task_context
from portal.telemetry import worker_metrics_serve
from portal.workers import worker_beats_start, worker_beats_stop, worker_name_set

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gpupool")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
@signals.task_postrun.connect
def connections_fit_for_the_next_task(sender: Any = None, **_: Any) -> None:
    """Treat a task like Django treats a request: keep its thread's database connections while
    ``CONN_MAX_AGE`` allows and they work (after an error, a health check decides).

    Celery's Django fixup would close them around every task instead (``CELERY_DB_REUSE_MAX``
    in settings turns that off): a dispatch batch or a scheduling cycle every few hundred
    milliseconds then paid for a new PostgreSQL connection each time (a visible share of the
    workers' CPU under ``bench/pipeline_bench.py``). Eager calls run inside the caller's
    transaction and are left alone, as the fixup leaves them.
    """
    request = getattr(sender, "request", None)
    if not getattr(request, "is_eager", False):
        close_old_connections()


_task_logs: dict[str, Any] = {}


@signals.task_prerun.connect
def task_log_context_enter(
    task_id: str = "", task: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    """Each log line of a task carries the job or cluster it works on (portal/logs.py)."""
    run = getattr(task, "run", None)
    fields = task_context(run, tuple(args or ()), kwargs) if run is not None else {}
    if fields:
        context = log_context(**fields)
        context.__enter__()
        _task_logs[task_id] = context


@signals.task_postrun.connect
def task_log_context_leave(task_id: str = "", **_: Any) -> None:
    context = _task_logs.pop(task_id, None)
    if context is not None:
        context.__exit__(None, None, None)


def logging_from_django_settings(**_: Any) -> None:
    """With ``LOG_FORMAT=json``, workers and beat log through Django's ``LOGGING`` (JSON
    lines, the context filter) instead of Celery's own root-logger set-up; connecting
    ``setup_logging`` is Celery's documented way to keep it from taking over. Plain logs keep
    Celery's format."""
    logging.config.dictConfig(settings.LOGGING)


if settings.LOG_FORMAT == "json":
    signals.setup_logging.connect(logging_from_django_settings)


@signals.worker_init.connect
def name_this_worker(sender: Any = None, **_: Any) -> None:
    """One name per worker start, shared by a prefork pool's children (set before the fork)."""
    worker_name_set(
        getattr(sender, "hostname", "") or "", int(getattr(sender, "concurrency", 0) or 0)
    )


@signals.worker_ready.connect
def start_beating(sender: Any = None, **_: Any) -> None:
    worker_beats_start()
    if settings.GPUPOOL_WORKER_METRICS_PORT:
        worker_metrics_serve(settings.GPUPOOL_WORKER_METRICS_PORT)


@signals.worker_shutdown.connect
def stop_beating(sender: Any = None, **_: Any) -> None:
    worker_beats_stop()
