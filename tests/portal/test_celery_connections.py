"""A Celery worker keeps its database connection between tasks and replaces a broken one.

Celery's Django fixup would close every connection around each task; the portal turns that off
and applies Django's request rule instead (``config/celery.py``). Each test runs what a worker
runs at a task boundary: the fixup's close, then the portal's handlers through the real signals.
"""

from __future__ import annotations

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import OperationalError, connection

from config.celery import app
from scheduling.tasks import run_cycle_task

pytestmark = pytest.mark.django_db(transaction=True)


def task_boundary() -> None:
    """What the worker does between two tasks: postrun of one, prerun of the next."""
    fixup = DjangoWorkerFixup(app)
    for signal in (signals.task_postrun, signals.task_prerun):
        fixup.close_database()
        signal.send(sender=run_cycle_task, task_id="t", task=run_cycle_task, args=(), kwargs={})


def backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def test_a_worker_keeps_its_database_connection_from_one_task_to_the_next():
    # A fresh connection: the one this test process has held since earlier tests may be older
    # than CONN_MAX_AGE, and replacing that one at the boundary would be right.
    connection.close()
    first = backend_pid()
    for _ in range(5):
        task_boundary()
    assert backend_pid() == first


def test_a_connection_postgresql_dropped_is_replaced_at_the_next_task(admin):
    dropped = backend_pid()
    admin.execute("SELECT pg_terminate_backend(%s, 10000)", [dropped])  # returns once it is gone
    with pytest.raises(OperationalError):
        backend_pid()  # the task that was running when PostgreSQL went away fails
    task_boundary()
    assert backend_pid() != dropped  # the next one works on a new connection
