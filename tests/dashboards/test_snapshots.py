"""The minute snapshot against a kubesim scenario: known allocations give known numbers; the
same minute twice is the same minute; hours are averaged and old rows pruned."""

from __future__ import annotations

import datetime as dt

import pytest

from dashboards.models import (
    HourRun,
    PoolHour,
    PoolMinute,
    QueueWait,
    SnapshotRun,
    TeamHour,
    TeamMinute,
    TeamModelHour,
    TeamModelMinute,
)
from dashboards.snapshots import snapshot_downsample, snapshot_prune, snapshot_take
from scheduling.models import GpuModel
from tests.dashboards.conftest import NOW
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _pool_row(key: str) -> PoolMinute:
    return PoolMinute.objects.get(gpu_model__key=key)


def test_the_snapshot_of_a_kubesim_cluster_adds_up(scenario, vision, language):
    result = snapshot_take(now=NOW)
    assert result.written and result.at == dt.datetime(2025, 3, 4, 10, 30, tzinfo=dt.UTC)
    a100 = _pool_row("a100-80gb")
    assert (a100.gpus_total, a100.gpus_allocatable, a100.nodes_total) == (20, 20, 3)
    assert a100.gpus_allocated == 12  # 8 running + 2 x 2 admitted
    assert a100.gpus_used_by_others == 1
    # free: a100-1 has 4 left, a100-mig-0 has 4 whole GPUs minus the foreign pod's one
    assert (a100.gpus_free, a100.largest_free_block) == (7, 4)
    assert a100.gpus_fragmented == 7  # both free blocks sit on partly used nodes
    v100 = _pool_row("v100-32gb")
    assert (v100.gpus_free, v100.gpus_unavailable, v100.nodes_cordoned) == (4, 4, 1)
    assert v100.gpus_fragmented == 0  # v100-0 is free as a whole node
    t4 = _pool_row("t4")
    assert (t4.gpus_free, t4.gpus_unavailable, t4.nodes_not_ready) == (2, 1, 1)
    mig = _pool_row("a100-80gb-mig-1g.10gb")
    assert (mig.gpus_allocatable, mig.gpus_free, mig.largest_free_block) == (14, 14, 14)
    assert PoolMinute.objects.count() == 5  # a100, two MIG profiles, v100, t4

    va = TeamModelMinute.objects.get(team=vision, gpu_model__key="a100-80gb")
    assert (va.gpus_allocated, va.gpus_running, va.nominal, va.borrowed) == (12, 8, 8, 4)
    vt = TeamModelMinute.objects.get(team=vision, gpu_model__key="t4")
    assert (vt.pending_gpus, vt.queued_jobs, vt.nominal) == (1, 1, 0)
    lv = TeamModelMinute.objects.get(team=language, gpu_model__key="v100-32gb")
    assert (lv.pending_gpus, lv.queued_jobs, lv.nominal, lv.gpus_allocated) == (8, 1, 4, 0)
    assert TeamModelMinute.objects.count() == 3  # sparse: nothing else is held, granted or asked

    vt = TeamMinute.objects.get(team=vision)
    assert (vt.gpus_allocated, vt.gpus_running, vt.queued_jobs, vt.pending_gpus) == (12, 8, 1, 1)
    assert vt.allocation_share == pytest.approx(12 / 20)  # dominant: A100, 12 of 20
    assert vt.share == pytest.approx(0.6) and vt.usage_share == 0
    assert vt.target_share == pytest.approx(0.5)  # two teams with work, equal weights
    lt = TeamMinute.objects.get(team=language)
    assert (lt.allocation_share, lt.target_share) == (0, pytest.approx(0.5))


def test_the_same_minute_twice_is_rewritten_not_doubled(scenario, vision):
    snapshot_take(now=NOW)
    a100 = GpuModel.objects.get(key="a100-80gb")
    JobFactory(
        team=vision,
        name="late",
        state="RUNNING",
        gpu_model=a100,
        cluster=scenario,
        replicas=1,
        gpus_per_replica=4,
        node_plan=["a100-1"],
    )
    again = snapshot_take(now=NOW + dt.timedelta(seconds=30))
    assert again.written and again.at == dt.datetime(2025, 3, 4, 10, 30, tzinfo=dt.UTC)
    assert SnapshotRun.objects.count() == 1
    assert PoolMinute.objects.filter(gpu_model=a100).count() == 1
    assert _pool_row("a100-80gb").gpus_allocated == 16
    assert TeamMinute.objects.get(team=vision).gpus_allocated == 16
    snapshot_take(now=NOW + dt.timedelta(minutes=1))
    assert SnapshotRun.objects.count() == 2


def test_an_empty_pool_snapshots_nothing_but_the_run(db, catalog):
    result = snapshot_take(now=NOW)
    assert result.written and (result.pool_rows, result.team_rows) == (0, 0)
    assert SnapshotRun.objects.count() == 1


def test_an_hour_is_averaged_over_the_minutes_that_ran(scenario, vision, language):
    hour = dt.datetime(2025, 3, 4, 9, 0, tzinfo=dt.UTC)
    snapshot_take(now=hour + dt.timedelta(minutes=1))
    snapshot_take(now=hour + dt.timedelta(minutes=2))
    # the third minute: Vision's running job is gone, the admitted one still holds 4 GPUs
    snapshot_take(now=hour + dt.timedelta(minutes=3))
    TeamModelMinute.objects.filter(
        at=hour + dt.timedelta(minutes=3), team=vision, gpu_model__key="a100-80gb"
    ).update(gpus_allocated=3, gpus_running=0)
    TeamMinute.objects.filter(at=hour + dt.timedelta(minutes=3), team=vision).update(
        gpus_allocated=3
    )
    # Language's row is missing at minute 2 (a sparse series): it counts as 0 there
    TeamMinute.objects.filter(at=hour + dt.timedelta(minutes=2), team=language).delete()
    done = snapshot_downsample(now=hour + dt.timedelta(minutes=75))
    assert done == [hour]
    assert HourRun.objects.get(at=hour).samples == 3
    va = TeamModelHour.objects.get(at=hour, team=vision, gpu_model__key="a100-80gb")
    assert va.gpus_allocated == pytest.approx((12 + 12 + 3) / 3)
    assert va.gpus_allocated_peak == 12 and va.nominal == 8
    assert TeamHour.objects.get(at=hour, team=vision).gpus_allocated == pytest.approx(9)
    lang = TeamHour.objects.get(at=hour, team=language)
    assert lang.pending_gpus == pytest.approx(8 * 2 / 3)
    assert lang.target_share == pytest.approx(0.5)  # a state: averaged over rows present
    assert PoolHour.objects.get(at=hour, gpu_model__key="a100-80gb").gpus_allocated == 12
    # nothing to do twice, and the hour still running is left alone
    assert snapshot_downsample(now=hour + dt.timedelta(minutes=80)) == []
    snapshot_take(now=hour + dt.timedelta(minutes=70))
    assert snapshot_downsample(now=hour + dt.timedelta(minutes=80)) == []
    assert snapshot_downsample(now=hour + dt.timedelta(minutes=121)) == [
        hour + dt.timedelta(hours=1)
    ]


def test_pruning_keeps_30_days_of_minutes_and_a_year_of_hours(scenario, vision, settings):
    settings.GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS = 30
    settings.GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS = 365
    for days in (45, 31, 29):
        snapshot_take(now=NOW - dt.timedelta(days=days))
    a100 = GpuModel.objects.get(key="a100-80gb")
    for days in (400, 366, 364):
        at = NOW - dt.timedelta(days=days)
        HourRun.objects.create(at=at, samples=60)
        PoolHour.objects.create(at=at, cluster=scenario, gpu_model=a100)
        TeamHour.objects.create(at=at, team=vision)
    deleted = snapshot_prune(now=NOW)
    assert sorted((NOW - r).days for r in SnapshotRun.objects.values_list("at", flat=True)) == [29]
    assert set(PoolMinute.objects.values_list("at", flat=True)) == set(
        SnapshotRun.objects.values_list("at", flat=True)
    )
    assert [(NOW - r).days for r in HourRun.objects.values_list("at", flat=True)] == [364]
    assert PoolHour.objects.count() == 1 and TeamHour.objects.count() == 1
    assert deleted > 0
    assert snapshot_prune(now=NOW) == 0
    assert QueueWait.objects.count() == 0
