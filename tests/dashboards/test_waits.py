"""Queue waits from job timelines, and their percentiles per team and model."""

from __future__ import annotations

import datetime as dt

import pytest

from dashboards.models import QueueWait
from dashboards.selectors.queue import _percentile, wait_stats
from dashboards.snapshots import queue_waits_collect
from portal.jobs.services import job_submit
from portal.jobs.state import job_transition
from portal.models import JobState
from scheduling.models import GpuModel
from tests.conftest import job_body
from tests.dashboards.conftest import NOW, place, start

pytestmark = pytest.mark.django_db


def _run_after(user, cluster, seconds: float, *, team: str = "vision", model: str = "t4"):
    queued = NOW - dt.timedelta(hours=2)
    job = job_submit(
        user=user,
        data=job_body(team=team, replicas=1, gpus_per_replica=1, min_gpu_memory_gib=None),
        now=queued,
    ).job
    running = queued + dt.timedelta(seconds=seconds)
    start(place(job, cluster=cluster, model=model, nodes=["n"], at=running), at=running)
    return job


def test_percentiles_of_constructed_waits(bob, charlie, pool):
    east = pool("east", "t4", nodes=1, gpus=1)
    for seconds in range(10, 101, 10):  # 10 s … 100 s
        _run_after(bob, east, seconds)
    for seconds in (600, 1200):
        _run_after(charlie, east, seconds, team="language", model="a100-80gb")
    assert queue_waits_collect() == 12
    assert queue_waits_collect() == 0  # collected once
    t4 = GpuModel.objects.get(key="t4").pk
    since, until = NOW - dt.timedelta(days=1), NOW
    per_model = {w.gpu_model_id: w for w in wait_stats(since=since, until=until, by_team=False)}
    w = per_model[t4]
    assert w.started == 10
    # percentile_cont: linear between closest ranks (rank = p x (n - 1))
    assert (w.p50, w.p90, w.p99) == pytest.approx((55.0, 91.0, 99.1))
    per_team = wait_stats(since=since, until=until, by_team=True)
    assert sorted((x.started, x.p50) for x in per_team) == [(2, 900.0), (10, 55.0)]
    assert wait_stats(since=NOW, until=NOW + dt.timedelta(hours=1), by_team=False) == []


def test_the_python_percentiles_match_postgres(bob, pool):
    assert _percentile([10.0], 0.99) == 10.0
    values = [float(v) for v in range(10, 101, 10)]
    assert [_percentile(values, p) for p in (0.5, 0.9, 0.99)] == pytest.approx([55, 91, 99.1])


def test_a_requeued_job_waits_twice(bob, pool):
    east = pool("east", "t4", nodes=1, gpus=1)
    job = _run_after(bob, east, 30)
    preempted = NOW - dt.timedelta(hours=1)
    assert job_transition(
        job_id=job.pk, expected=JobState.RUNNING, to=JobState.PREEMPTING, reason="P", now=preempted
    )
    assert job_transition(
        job_id=job.pk, expected=JobState.PREEMPTING, to=JobState.QUEUED, reason="Q", now=preempted
    )
    job.refresh_from_db()
    again = preempted + dt.timedelta(minutes=5)
    start(place(job, cluster=east, model="t4", nodes=["n"], at=again), at=again)
    queue_waits_collect()
    assert sorted(QueueWait.objects.values_list("wait_seconds", flat=True)) == [30.0, 300.0]


def test_collection_pages_through_many_events(bob, pool):
    east = pool("east", "t4", nodes=1, gpus=1)
    for seconds in range(1, 8):
        _run_after(bob, east, seconds)
    assert queue_waits_collect(batch=2) == 7
    assert QueueWait.objects.count() == 7


def test_cached_stats_see_a_newly_collected_wait_at_once(bob, pool):
    from django.utils import timezone

    from dashboards.selectors.queue import wait_stats_recent

    east = pool("east", "t4", nodes=1, gpus=1)
    now = timezone.now()
    window = dt.timedelta(days=800)  # NOW, the runs' clock, lies in the past
    _run_after(bob, east, 10)
    queue_waits_collect()
    assert [w.started for w in wait_stats_recent(now=now, window=window, by_team=False)] == [1]
    _run_after(bob, east, 20)
    queue_waits_collect()
    assert [w.started for w in wait_stats_recent(now=now, window=window, by_team=False)] == [2]
