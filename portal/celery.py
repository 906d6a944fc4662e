"""The Celery application: configured from Django settings (``CELERY_*``)."""

import os
from typing import Any

from celery import Celery, signals
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

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
