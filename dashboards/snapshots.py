"""Writers of the dashboards' time series: the minute snapshot, its hourly downsample, pruning,
and the queue waits read from job timelines.

Each is idempotent, so beat firing twice, a retried task or two workers racing change nothing
twice:

* ``snapshot_take`` owns one minute: it replaces whatever that minute held, under a
  transaction-scoped advisory lock so that two runs in the same minute do not interleave;
* ``snapshot_downsample`` owns one hour the same way, and only hours that are over;
* ``snapshot_prune`` deletes by age, a day at a time;
* ``queue_waits_collect`` keys each wait by the RUNNING event it ends with.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Avg, Max, Q, Sum
from django.utils import timezone

from dashboards.live import LiveState
from dashboards.live_types import POOL_FIGURES
from dashboards.models import (
    HourRun,
    JobUtilization,
    PoolHour,
    PoolMinute,
    QueueWait,
    SnapshotRun,
    TeamHour,
    TeamMinute,
    TeamModelHour,
    TeamModelMinute,
)
from portal import db
from portal.models import Job, JobEvent, JobState

log = logging.getLogger(__name__)

# Postgres advisory lock keys (transaction-scoped): "gpd1" snapshot, "gpd2" downsample.
SNAPSHOT_LOCK_KEY = 0x67706431
DOWNSAMPLE_LOCK_KEY = 0x67706432

TEAM_MODEL_FIGURES = (
    "gpus_allocated",
    "gpus_running",
    "nominal",
    "borrowed",
    "pending_gpus",
    "queued_jobs",
)
TEAM_FIGURES = (
    "gpus_allocated",
    "gpus_running",
    "pending_gpus",
    "queued_jobs",
    "weight",
    "allocation_share",
    "usage_share",
    "share",
    "target_share",
)
# Figures that describe a state while a row exists (averaged over the rows present), as
# opposed to amounts that are zero when the (sparse) row is missing (summed / minutes).
_STATE_FIGURES = frozenset({"nominal", "weight", "target_share"})


def minute_floor(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(second=0, microsecond=0)


def hour_floor(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class SnapshotResult:
    at: dt.datetime
    written: bool
    pool_rows: int = 0
    team_model_rows: int = 0
    team_rows: int = 0
    took_ms: float = 0.0


def snapshot_take(*, now: dt.datetime | None = None) -> SnapshotResult:
    """Write the pool, per-team-and-model and per-team figures of the current minute."""
    started = time.perf_counter()
    now = now or timezone.now()
    at = minute_floor(now)
    live = LiveState(now=now)
    pool = [PoolMinute(at=at, **cell_figures(c)) for c in live.cells.values()]
    team_model = [
        TeamModelMinute(
            at=at,
            team_id=c.team_id,
            gpu_model_id=c.gpu_model_id,
            **{name: getattr(c, name) for name in TEAM_MODEL_FIGURES},
        )
        for c in live.team_cells.values()
        if not c.is_empty()
    ]
    teams = [
        TeamMinute(at=at, team_id=s.team_id, **{name: getattr(s, name) for name in TEAM_FIGURES})
        for s in live.standings.values()
        if not s.is_empty()
    ]
    took_ms = (time.perf_counter() - started) * 1e3
    with transaction.atomic():
        if not db.try_transaction_lock(SNAPSHOT_LOCK_KEY):
            return SnapshotResult(at=at, written=False)  # another run is writing this minute
        for model in (PoolMinute, TeamModelMinute, TeamMinute, SnapshotRun):
            model.objects.filter(at=at).delete()
        PoolMinute.objects.bulk_create(pool, batch_size=2000)
        TeamModelMinute.objects.bulk_create(team_model, batch_size=2000)
        TeamMinute.objects.bulk_create(teams, batch_size=2000)
        SnapshotRun.objects.create(
            at=at,
            taken_at=now,
            took_ms=took_ms,
            gpus_allocated=sum(row.gpus_allocated for row in pool),
        )
    return SnapshotResult(at, True, len(pool), len(team_model), len(teams), took_ms)


def cell_figures(cell: Any) -> dict[str, Any]:
    return {
        "cluster_id": cell.cluster_id,
        "gpu_model_id": cell.gpu_model_id,
        **{name: getattr(cell, name) for name in POOL_FIGURES},
    }


# ---------------------------------------------------------------------------------------------
# Downsampling
# ---------------------------------------------------------------------------------------------
def _hour_aggregates(
    source: type[models.Model],
    keys: tuple[str, ...],
    figures: Iterable[str],
    start: dt.datetime,
    samples: int,
) -> list[dict[str, Any]]:
    """One dict per series of ``source`` in the hour from ``start``: amounts summed and
    divided by the minutes sampled (a missing sparse row is a zero), states averaged over the
    rows present, plus the peak allocation."""
    figures = tuple(figures)
    annotations: dict[str, Any] = {}
    for name in figures:
        annotations[f"v_{name}"] = Avg(name) if name in _STATE_FIGURES else Sum(name)
    annotations["v_peak"] = Max("gpus_allocated")
    rows = (
        source.objects.filter(at__gte=start, at__lt=start + dt.timedelta(hours=1))
        .values(*keys)
        .annotate(**annotations)
        .order_by()
    )
    out = []
    for r in rows:
        values = {k: r[k] for k in keys}
        for name in figures:
            v = r[f"v_{name}"]
            values[name] = v if name in _STATE_FIGURES else (v or 0) / samples
        values["gpus_allocated_peak"] = r["v_peak"] or 0
        out.append(values)
    return out


def snapshot_downsample(
    *, now: dt.datetime | None = None, max_hours: int = 48
) -> list[dt.datetime]:
    """Average every finished hour that has minute snapshots and no hourly rows yet.

    Runs every few minutes; each hour is written once, in its own transaction, oldest first,
    at most ``max_hours`` per run (a worker back from a long outage catches up over a few
    runs instead of holding one long transaction).
    """
    now = now or timezone.now()
    current = hour_floor(now)
    last = HourRun.objects.aggregate(m=Max("at"))["m"]
    runs = SnapshotRun.objects.filter(at__lt=current)
    if last is not None:
        runs = runs.filter(at__gte=last + dt.timedelta(hours=1))
    per_hour: dict[dt.datetime, int] = defaultdict(int)
    for at in runs.order_by("at").values_list("at", flat=True)[: max_hours * 60 + 60]:
        per_hour[hour_floor(at)] += 1
    done = []
    for start in sorted(per_hour)[:max_hours]:
        samples = per_hour[start]
        pool = _hour_aggregates(
            PoolMinute, ("cluster_id", "gpu_model_id"), POOL_FIGURES, start, samples
        )
        team_model = _hour_aggregates(
            TeamModelMinute, ("team_id", "gpu_model_id"), TEAM_MODEL_FIGURES, start, samples
        )
        teams = _hour_aggregates(TeamMinute, ("team_id",), TEAM_FIGURES, start, samples)
        peak = SnapshotRun.objects.filter(
            at__gte=start, at__lt=start + dt.timedelta(hours=1)
        ).aggregate(m=Max("gpus_allocated"))["m"]
        with transaction.atomic():
            if not db.try_transaction_lock(DOWNSAMPLE_LOCK_KEY):
                break
            for model in (PoolHour, TeamModelHour, TeamHour, HourRun):
                model.objects.filter(at=start).delete()
            PoolHour.objects.bulk_create([PoolHour(at=start, **r) for r in pool], batch_size=2000)
            TeamModelHour.objects.bulk_create(
                [TeamModelHour(at=start, **r) for r in team_model], batch_size=2000
            )
            TeamHour.objects.bulk_create([TeamHour(at=start, **r) for r in teams], batch_size=2000)
            HourRun.objects.create(
                at=start,
                samples=samples,
                gpus_allocated=sum(r["gpus_allocated"] for r in pool),
                gpus_allocated_peak=peak or 0,
            )
        done.append(start)
    return done


# ---------------------------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------------------------
def snapshot_prune(*, now: dt.datetime | None = None, chunk: dt.timedelta | None = None) -> int:
    """Delete minute rows past the minute retention and hourly rows (and waits, utilization
    readings) past the hourly retention; returns the rows deleted.

    Deletes a day of rows per statement, oldest first, so the first run after a long pause does
    not hold one huge transaction.
    """
    now = now or timezone.now()
    chunk = chunk or dt.timedelta(days=1)
    minute_cutoff = now - dt.timedelta(days=settings.GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS)
    hour_cutoff = now - dt.timedelta(days=settings.GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS)
    deleted = 0
    plan: list[tuple[type[models.Model], str, dt.datetime]] = [
        (PoolMinute, "at", minute_cutoff),
        (TeamModelMinute, "at", minute_cutoff),
        (TeamMinute, "at", minute_cutoff),
        (SnapshotRun, "at", minute_cutoff),
        (PoolHour, "at", hour_cutoff),
        (TeamModelHour, "at", hour_cutoff),
        (TeamHour, "at", hour_cutoff),
        (HourRun, "at", hour_cutoff),
        (QueueWait, "started_at", hour_cutoff),
        (JobUtilization, "measured_at", hour_cutoff),
    ]
    for model, column, cutoff in plan:
        oldest = model.objects.aggregate(m=models.Min(column))["m"]
        while oldest is not None and oldest < cutoff:
            upto = min(cutoff, oldest + chunk)
            count, _ = model.objects.filter(**{f"{column}__lt": upto}).delete()
            deleted += count
            oldest = upto if upto < cutoff else None
    return deleted


# ---------------------------------------------------------------------------------------------
# Queue waits
# ---------------------------------------------------------------------------------------------
# Event ids come from a sequence: an event committed late may carry an id below one already
# seen. Rescanning this many ids behind the newest collected wait catches those.
WAIT_RESCAN_IDS = 20_000


def queue_waits_collect(*, batch: int = 5000, max_batches: int = 20) -> int:
    """Record a QueueWait for every RUNNING transition not recorded yet; returns how many.

    The wait ends at the RUNNING event and starts at the job's latest entry into QUEUED
    before it (its submission, or the requeue after a preemption). Scans the timeline by
    primary key, so each run costs a range scan over the new events, whatever the table size.
    """
    newest = QueueWait.objects.aggregate(m=Max("event_id"))["m"] or 0
    cursor = max(0, newest - WAIT_RESCAN_IDS)
    written = 0
    for _ in range(max_batches):
        events = list(
            JobEvent.objects.filter(id__gt=cursor, to_state=JobState.RUNNING)
            .exclude(from_state=JobState.RUNNING)  # facts about a running job, not a start
            .order_by("id")
            .values("id", "job_id", "created_at")[:batch]
        )
        if not events:
            break
        cursor = events[-1]["id"]
        known = set(
            QueueWait.objects.filter(event_id__in=[e["id"] for e in events]).values_list(
                "event_id", flat=True
            )
        )
        fresh = [e for e in events if e["id"] not in known]
        written += _record_waits(fresh)
        if len(events) < batch:
            break
    return written


def _record_waits(events: list[dict[str, Any]]) -> int:
    if not events:
        return 0
    job_ids = {e["job_id"] for e in events}
    entries: dict[int, list[tuple[dt.datetime, int]]] = defaultdict(list)
    for job_id, created_at, event_id in (
        JobEvent.objects.filter(job_id__in=job_ids, to_state=JobState.QUEUED)
        .filter(~Q(from_state=JobState.QUEUED))
        .values_list("job_id", "created_at", "id")
    ):
        entries[job_id].append((created_at, event_id))
    jobs = {
        j["id"]: j
        for j in Job.objects.filter(id__in=job_ids).values(
            "id", "team_id", "gpu_model_id", "replicas", "gpus_per_replica"
        )
    }
    rows = []
    for e in events:
        job = jobs.get(e["job_id"])
        before = [c for c, i in entries.get(e["job_id"], []) if (c, i) < (e["created_at"], e["id"])]
        if job is None or not before:
            continue
        queued_at = max(before)
        rows.append(
            QueueWait(
                event_id=e["id"],
                job_id=job["id"],
                team_id=job["team_id"],
                gpu_model_id=job["gpu_model_id"],
                gpus=job["replicas"] * job["gpus_per_replica"],
                queued_at=queued_at,
                started_at=e["created_at"],
                wait_seconds=max(0.0, (e["created_at"] - queued_at).total_seconds()),
            )
        )
    QueueWait.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
    return len(rows)
