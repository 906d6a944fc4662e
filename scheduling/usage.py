"""The usage ledger: GPU-hours per team, user, model and UTC hour, weighted by cost factor.

``usage_account`` is idempotent and incremental: each job remembers up to when its GPU time is
in the ledger (``Job.usage_accounted_until``), so a run that crashed or ran twice neither loses
nor double-counts an hour. It accounts running jobs up to ``now`` and finished ones up to their
``finished_at``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.models import Job, JobState
from rules.engine.sharing import charged_gib
from scheduling.models import GpuModel, UsageRecord

Bucket = tuple[int, int | None, int, dt.datetime]  # team, user, model, hour


def hour_slices(start: dt.datetime, end: dt.datetime) -> Iterator[tuple[dt.datetime, float]]:
    """(start of UTC hour, hours of [start, end) inside it), for each hour the span touches."""
    cursor = start
    while cursor < end:
        hour = cursor.replace(minute=0, second=0, microsecond=0)
        stop = min(end, hour + dt.timedelta(hours=1))
        yield hour, (stop - cursor).total_seconds() / 3600
        cursor = stop


def _units_per_replica(job: dict[str, Any], device_gib: float) -> float:
    """What a replica is charged per hour, in its model's units: GPUs (or slices), or for a
    shared GPU its dominant share in GiB-equivalents (see ``rules.engine.sharing``)."""
    if job["gpu_memory_gib"] is None:
        return float(job["gpus_per_replica"])
    return charged_gib(job["gpu_memory_gib"], job["gpu_cores_percent"], device_gib)


def usage_account(*, now: dt.datetime | None = None) -> int:
    """Add GPU time not yet in the ledger; returns how many jobs were accounted."""
    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(started_at__isnull=False, gpu_model__isnull=False)
        .filter(Q(state=JobState.RUNNING) | Q(finished_at__isnull=False))
        .filter(
            Q(usage_accounted_until__isnull=True)
            | Q(finished_at__isnull=True)
            | Q(usage_accounted_until__lt=F("finished_at"))
        )
        .values(
            "id",
            "team_id",
            "owner_id",
            "gpu_model_id",
            "replicas",
            "gpus_per_replica",
            "gpu_memory_gib",
            "gpu_cores_percent",
            "started_at",
            "finished_at",
            "usage_accounted_until",
        )
    )
    if not jobs:
        return 0
    cost = dict(GpuModel.objects.values_list("id", "cost_factor"))
    device_gib = dict(GpuModel.objects.values_list("id", "memory_gib"))
    buckets: dict[Bucket, float] = defaultdict(float)
    accounted: dict[int, dt.datetime] = {}
    for j in jobs:
        start = max(j["usage_accounted_until"] or j["started_at"], j["started_at"])
        end = min(j["finished_at"] or now, now)
        if end <= start:
            continue
        gpus = j["replicas"] * _units_per_replica(j, device_gib.get(j["gpu_model_id"], 0))
        for hour, hours in hour_slices(start, end):
            buckets[(j["team_id"], j["owner_id"], j["gpu_model_id"], hour)] += gpus * hours
        accounted[j["id"]] = end
    with transaction.atomic():
        # Lock the jobs we account so a concurrent run skips them instead of counting twice.
        mine = set(
            Job.objects.select_for_update(skip_locked=True)
            .filter(id__in=accounted)
            .filter(
                Q(usage_accounted_until__isnull=True)
                | Q(usage_accounted_until__lt=F("finished_at"))
                | Q(finished_at__isnull=True)
            )
            .values_list("id", flat=True)
        )
        if mine != set(accounted):
            return 0  # another run holds some of them: let it finish, try next minute
        for (team, user, model, hour), gpu_hours in buckets.items():
            updated = UsageRecord.objects.filter(
                team_id=team, user_id=user, gpu_model_id=model, hour=hour
            ).update(
                gpu_hours=F("gpu_hours") + gpu_hours,
                weighted_gpu_hours=F("weighted_gpu_hours") + gpu_hours * cost[model],
            )
            if not updated:
                UsageRecord.objects.create(
                    team_id=team,
                    user_id=user,
                    gpu_model_id=model,
                    hour=hour,
                    gpu_hours=gpu_hours,
                    weighted_gpu_hours=gpu_hours * cost[model],
                )
        for job_id, until in accounted.items():
            Job.objects.filter(id=job_id).update(usage_accounted_until=until)
    return len(accounted)
