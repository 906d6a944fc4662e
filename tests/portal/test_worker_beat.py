"""A worker's beat is one UPDATE a second: every Celery worker writes it, all day long."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal import workers
from portal.models import WorkerBeat

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as in the beat thread


@pytest.fixture
def named(monkeypatch):
    monkeypatch.setattr(workers, "_name", "host:123:abcdef")
    return "host:123:abcdef"


def test_a_beat_is_a_single_update_once_the_row_exists(named):
    workers._beat()  # the first beat makes the row
    first = WorkerBeat.objects.get(name=named).seen_at
    with CaptureQueriesContext(connection) as queries:
        workers._beat()
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["UPDATE"]
    assert WorkerBeat.objects.get(name=named).seen_at > first
    assert named in workers.live_workers()


def test_a_row_swept_while_the_worker_was_starved_comes_back_with_the_next_beat(named):
    workers._beat()
    WorkerBeat.objects.filter(name=named).delete()  # what the re-drive does to old rows
    assert named not in workers.live_workers()
    workers._beat()
    assert WorkerBeat.objects.filter(name=named).count() == 1
    assert named in workers.live_workers(now=timezone.now() + dt.timedelta(seconds=1))
