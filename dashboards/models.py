"""What the dashboards remember: minute snapshots of the pool, their hourly downsample, queue
waits, and GPU utilization read from DCGM.

Snapshots are a time series of the pool as the portal saw it; they are never the truth the
scheduler acts on (that is the job table and the node inventory). Three series, each at two
resolutions:

* per (cluster, GPU model): capacity and how it is used (``PoolMinute`` / ``PoolHour``);
* per (team, GPU model): allocation, quota and demand (``TeamModelMinute`` / ``TeamModelHour``);
* per team: totals and fair share (``TeamMinute`` / ``TeamHour``), so the "stacked by team"
  and fair-share charts read one row per team and instant instead of one per model.

Minute rows are kept for ``GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS`` (30), hourly rows for
``GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS`` (365). Team rows are sparse: a (team, model) with
nothing allocated, queued or granted is not written, and counts as zero.

The series' main index is their unique key, which starts with the instant: most reads are "these
instants (and these teams)". The per-team series also have one by team and instant, for the
charts' "these few teams over this window". The foreign keys carry no index of their own;
deleting a cluster or model (rare, and refused while jobs refer to it) scans the series instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models


class SnapshotRun(models.Model):
    """One minute of the series was written: its minute is the key, so a second run in the same
    minute rewrites that minute instead of adding one. Hourly averages divide by the number of
    runs in the hour, so a minute the worker missed does not count as an idle minute.

    ``gpus_allocated`` is the whole pool's total at that minute (the sum of its ``PoolMinute``
    rows), kept here so that a chart's peak per step (the highest minute) reads one row per
    minute instead of summing every (cluster, model) row of every minute."""

    at = models.DateTimeField(unique=True, help_text="Start of the UTC minute")
    taken_at = models.DateTimeField(help_text="When the snapshot was actually taken")
    took_ms = models.FloatField(default=0)
    gpus_allocated = models.PositiveIntegerField(
        default=0, help_text="GPUs allocated to portal jobs in the whole pool"
    )

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"snapshot {self.at:%Y-%m-%d %H:%M}"


class HourRun(models.Model):
    """One hour of the series was downsampled (``samples`` minute runs went into it), with the
    whole pool's allocation over it: the hour's mean and its highest minute."""

    at = models.DateTimeField(unique=True, help_text="Start of the UTC hour")
    samples = models.PositiveSmallIntegerField(default=0)
    gpus_allocated = models.FloatField(default=0, help_text="Mean over the hour, whole pool")
    gpus_allocated_peak = models.PositiveIntegerField(
        default=0, help_text="Highest minute of the hour, whole pool"
    )

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"hour {self.at:%Y-%m-%d %H}h ({self.samples} samples)"


# A minute row counts (whole numbers); an hour row holds the minutes' means (fractions) and,
# for the allocation, the highest minute. Each series is written once, for either kind.
Count = Callable[..., "models.Field[Any, Any]"]


def _whole(**kwargs: Any) -> models.Field[Any, Any]:
    return models.PositiveIntegerField(default=0, **kwargs)


def _mean(**kwargs: Any) -> models.Field[Any, Any]:
    return models.FloatField(default=0, **kwargs)


def _pool_series(count: Count, *, total_help: str = "") -> type[models.Model]:
    """The fields of the per (cluster, GPU model) series, counted by ``count``."""

    class PoolSeries(models.Model):
        at = models.DateTimeField()
        cluster = models.ForeignKey(
            "clusters.Cluster", on_delete=models.CASCADE, related_name="+", db_index=False
        )
        gpu_model = models.ForeignKey(
            "scheduling.GpuModel", on_delete=models.CASCADE, related_name="+", db_index=False
        )
        gpus_total = count(help_text=total_help)
        gpus_allocatable = count()
        gpus_allocated = count()
        gpus_used_by_others = count()
        gpus_free = count()
        gpus_unavailable = count()
        gpus_fragmented = count()
        largest_free_block = count()
        nodes_total = count()
        nodes_not_ready = count()
        nodes_cordoned = count()

        class Meta:
            abstract = True

    return PoolSeries


def _team_model_series(count: Count) -> type[models.Model]:
    """The fields of the per (team, GPU model) series, counted by ``count``."""

    class TeamModelSeries(models.Model):
        at = models.DateTimeField()
        team = models.ForeignKey(
            "portal.Team", on_delete=models.CASCADE, related_name="+", db_index=False
        )
        gpu_model = models.ForeignKey(
            "scheduling.GpuModel", on_delete=models.CASCADE, related_name="+", db_index=False
        )
        gpus_allocated = count()
        gpus_running = count()
        nominal = count()
        borrowed = count()
        pending_gpus = count()
        queued_jobs = count()

        class Meta:
            abstract = True

    return TeamModelSeries


def _team_series(count: Count) -> type[models.Model]:
    """The fields of the per-team series, counted by ``count``; the shares are fractions at
    both resolutions."""

    class TeamSeries(models.Model):
        at = models.DateTimeField()
        team = models.ForeignKey(
            "portal.Team", on_delete=models.CASCADE, related_name="+", db_index=False
        )
        gpus_allocated = count()
        gpus_running = count()
        pending_gpus = count()
        queued_jobs = count()
        weight = models.FloatField(default=1.0)
        allocation_share = models.FloatField(default=0)
        usage_share = models.FloatField(default=0)
        share = models.FloatField(default=0)
        target_share = models.FloatField(null=True, blank=True)

        class Meta:
            abstract = True

    return TeamSeries


class PoolMinute(_pool_series(_whole, total_help="Capacity the nodes report")):
    """The GPUs of one model on one cluster at one minute.

    ``gpus_allocatable`` splits into ``gpus_allocated`` (portal jobs holding them),
    ``gpus_used_by_others`` (pods the portal did not create), ``gpus_free`` (on ready,
    schedulable nodes) and ``gpus_unavailable`` (free but on NotReady or cordoned nodes).
    ``gpus_fragmented`` is the part of ``gpus_free`` on nodes that are partly in use: free, but
    not as a whole node, so a replica asking for a full node cannot use it.
    ``largest_free_block`` is the most free GPUs on one node: the largest replica that fits now.
    """

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["at", "cluster", "gpu_model"], name="one_pool_minute_per_series"
            )
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.cluster_id}/{self.gpu_model_id}"


class PoolHour(_pool_series(_mean)):
    """``PoolMinute`` averaged over one UTC hour (``*_peak``: the highest minute)."""

    gpus_allocated_peak = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["at", "cluster", "gpu_model"], name="one_pool_hour_per_series"
            )
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H}h {self.cluster_id}/{self.gpu_model_id}"


class TeamModelMinute(_team_model_series(_whole)):
    """One team's GPUs of one model at one minute.

    ``gpus_allocated`` counts jobs that hold quota (admitted to cancelling), ``gpus_running``
    those of them that run; ``borrowed`` is what is allocated above ``nominal``.
    ``pending_gpus`` / ``queued_jobs`` are queued jobs counted on the model they wait for (the
    closest candidate of the last cycle, else the model named, else the first choice).
    """

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["at", "team", "gpu_model"], name="one_team_model_minute_per_series"
            )
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.team_id}/{self.gpu_model_id}"


class TeamModelHour(_team_model_series(_mean)):
    """``TeamModelMinute`` averaged over one UTC hour."""

    gpus_allocated_peak = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["at", "team", "gpu_model"], name="one_team_model_hour_per_series"
            )
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H}h {self.team_id}/{self.gpu_model_id}"


class TeamMinute(_team_series(_whole)):
    """One team's totals over all models and its fair-share standing at one minute.

    The shares are the scheduling engine's (``rules/engine/fairshare.py``):
    ``allocation_share`` is the dominant share (max over models of allocated / pool GPUs),
    ``usage_share`` decayed cost-weighted GPU-hours over what the pool delivers in the decay
    horizon, ``share`` = (allocation + usage weight x usage) / weight, the value the cycle orders
    teams by. ``target_share`` = weight / the summed weights of teams with work (null when the
    team has none): where equal weighted shares would put it.
    """

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["at", "team"], name="one_team_minute_per_series")
        ]
        # A chart reads its few teams over a window: a day of 200 teams' minutes is 288,000
        # entries of the unique key, their 8 teams' 11,520 of this one.
        indexes = [models.Index(fields=["team", "at"], name="teamminute_by_team")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.team_id}"


class TeamHour(_team_series(_mean)):
    """``TeamMinute`` averaged over one UTC hour."""

    gpus_allocated_peak = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["at", "team"], name="one_team_hour_per_series")
        ]
        indexes = [models.Index(fields=["team", "at"], name="teamhour_by_team")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H}h {self.team_id}"


class QueueWait(models.Model):
    """One wait in the queue: from entering QUEUED (submitted, or requeued after preemption) to
    RUNNING, read from the job's timeline. A job preempted twice has three waits.

    ``event_id`` is the JobEvent of the RUNNING transition, so collecting twice is harmless.
    """

    event_id = models.BigIntegerField(unique=True)
    job = models.ForeignKey("portal.Job", on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    gpu_model = models.ForeignKey(
        "scheduling.GpuModel", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    gpus = models.PositiveIntegerField(default=0)
    queued_at = models.DateTimeField()
    started_at = models.DateTimeField()
    wait_seconds = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["started_at"], name="queuewait_by_start")]

    def __str__(self) -> str:
        return f"job {self.job_id} waited {self.wait_seconds:.0f} s"


class MetricsSource(models.Model):
    """How the last read of a cluster's Prometheus went: pages show "metrics unavailable" when
    it failed or is older than a few collection intervals, and keep rendering either way."""

    cluster = models.OneToOneField(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="metrics_source"
    )
    checked_at = models.DateTimeField()
    ok = models.BooleanField(default=False)
    message = models.TextField(blank=True, help_text="Why the last read failed, in words")
    series = models.PositiveIntegerField(default=0, help_text="GPU series in the last answer")

    def __str__(self) -> str:
        return f"{self.cluster_id}: {'ok' if self.ok else 'unavailable'}"


class JobUtilization(models.Model):
    """A running job's GPU utilization over the last window, from DCGM via Prometheus.

    ``gpu_util_*`` are percent (0-100) over the job's GPUs: ``DCGM_FI_DEV_GPU_UTIL``, or
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` x 100 for MIG slices. ``idle`` means every sample of every
    GPU stayed under the idle threshold for the whole window while the job held its GPUs:
    an "idle allocation". ``idle_since`` is when it was first seen idle (kept while it stays so).
    """

    job = models.OneToOneField("portal.Job", on_delete=models.CASCADE, related_name="utilization")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    measured_at = models.DateTimeField()
    window_minutes = models.PositiveIntegerField(default=30)
    gpus_reporting = models.PositiveIntegerField(default=0)
    gpu_util_avg = models.FloatField(null=True, blank=True)
    gpu_util_max = models.FloatField(null=True, blank=True)
    memory_used_mib = models.FloatField(null=True, blank=True)
    memory_total_mib = models.FloatField(null=True, blank=True)
    idle = models.BooleanField(default=False)
    idle_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["idle", "measured_at"], name="jobutil_idle")]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.gpu_util_avg}% ({'idle' if self.idle else 'busy'})"


class StartEstimateRecord(models.Model):
    """The start estimate a queued job was given and how it came out: how the portal proves
    its estimates.

    One row per job, written by the estimate refresh (``portal.hooks.estimates_refreshed``),
    never by the submit: the ``first_*`` fields are the first estimate it got after its
    submit (what the user planned with), the others its likely range now (what the pages show
    beside the point estimate on the job row), and ``started_at`` its actual first admission,
    set once it left the queue. Calibration compares the first with the actual start.
    """

    job = models.OneToOneField(
        "portal.Job", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    first_at = models.DateTimeField(help_text="First estimate: the most likely start")
    first_earliest = models.DateTimeField(null=True)
    first_latest = models.DateTimeField(null=True)
    first_runs = models.PositiveIntegerField(default=0)
    first_made_at = models.DateTimeField(help_text="When the first estimate was made")
    earliest = models.DateTimeField(null=True, help_text="Likely range now: soonest")
    latest = models.DateTimeField(null=True, help_text="Likely range now: latest")
    runs = models.PositiveIntegerField(default=0, help_text="Comparable finished runs")
    unknown = models.BooleanField(
        default=False, help_text="It waits on a running job that outlived what was learned"
    )
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, help_text="Actual first admission")

    class Meta:
        indexes = [models.Index(fields=["started_at"], name="startestimate_by_start")]

    def __str__(self) -> str:
        return f"job {self.job_id}: first estimate {self.first_at:%Y-%m-%d %H:%M}"
