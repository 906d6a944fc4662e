"""The usage ledger: GPU-hours per hour bucket, weighted by cost, counted exactly once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Sum

from portal.models import JobState
from scheduling.models import GpuModel, UsageRecord
from scheduling.snapshot import decayed_usage
from scheduling.usage import hour_slices, usage_account
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)


def test_hour_slices_split_a_span_at_hour_boundaries():
    slices = list(hour_slices(T0, T0 + dt.timedelta(minutes=90)))
    assert [(h.hour, round(x, 3)) for h, x in slices] == [(10, 0.5), (11, 1.0)]


def test_a_running_job_is_accounted_once_per_minute_of_gpu_time(bob, vision, catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    t4 = GpuModel.objects.get(key="t4")
    JobFactory(
        team=vision,
        owner=bob,
        state=JobState.RUNNING,
        gpu_model=a100,
        replicas=2,
        gpus_per_replica=1,
        started_at=T0,
    )
    JobFactory(
        team=vision,
        owner=bob,
        state=JobState.SUCCEEDED,
        gpu_model=t4,
        replicas=1,
        gpus_per_replica=4,
        started_at=T0,
        finished_at=T0 + dt.timedelta(minutes=30),
    )
    now = T0 + dt.timedelta(minutes=90)
    assert usage_account(now=now) == 2
    assert usage_account(now=now) == 0  # idempotent: nothing new to count
    by_model = dict(
        UsageRecord.objects.values("gpu_model__key")
        .annotate(h=Sum("gpu_hours"))
        .values_list("gpu_model__key", "h")
    )
    assert by_model["a100-80gb"] == pytest.approx(3.0)  # 2 GPUs × 1.5 h
    assert by_model["t4"] == pytest.approx(2.0)  # 4 GPUs × 0.5 h
    t4_weighted = UsageRecord.objects.filter(gpu_model=t4).aggregate(w=Sum("weighted_gpu_hours"))
    assert t4_weighted["w"] == pytest.approx(2.0 * t4.cost_factor)
    usage_account(now=now + dt.timedelta(minutes=30))
    total = UsageRecord.objects.filter(gpu_model=a100).aggregate(h=Sum("gpu_hours"))["h"]
    assert total == pytest.approx(4.0)


def test_usage_decays_with_the_half_life(bob, vision, catalog):
    a100 = GpuModel.objects.get(key="a100-80gb")
    UsageRecord.objects.create(
        team=vision,
        user=bob,
        gpu_model=a100,
        hour=T0.replace(hour=0, minute=0),
        gpu_hours=10,
        weighted_gpu_hours=10,
    )
    week = dt.timedelta(days=7)
    fresh = decayed_usage(now=T0.replace(hour=12, minute=0), half_life=week)
    old = decayed_usage(now=T0.replace(hour=12, minute=0) + week, half_life=week)
    assert fresh[("vision", "a100-80gb")] == pytest.approx(10)
    assert old[("vision", "a100-80gb")] == pytest.approx(5)
