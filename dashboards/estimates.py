"""A queued job's start estimate: the inputs of ``scheduling.engine.estimate`` in a few queries.

Here rather than in the portal because the wait history lives in this wing (``QueueWait``);
the portal asks through ``portal.hooks.start_estimate``, connected in ``DashboardsConfig``.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import Sum
from django.db.models.functions import Coalesce

from clusters.models import ClusterState, Node
from dashboards.selectors.queue import wait_stats_recent
from portal.models import HOLDING_STATES, Job, JobState
from scheduling.engine.estimate import Release, StartEstimate, WaitHistory, estimate_start
from scheduling.models import GpuModel, Quota

RELEASES_READ = 5000
"""At most this many running jobs are walked (the soonest to end): beyond it an estimate
would be hours out anyway."""


def _candidate_model(job: Job) -> GpuModel | None:
    """The closest candidate the cycle found, else the first model the user named."""
    key = job.pending_model or (job.gpu_models[0] if job.gpu_models else "")
    return GpuModel.objects.filter(key=key).first() if key else None


def job_start_estimate(job: Job, now: dt.datetime) -> StartEstimate | None:
    """The estimate for a queued job (None for any other state)."""
    if job.state != JobState.QUEUED:
        return None
    model = _candidate_model(job)
    if model is None:
        return StartEstimate(
            at=None,
            source="none",
            basis="no estimate: no model the pool has could take this job"
            if job.pending_reason_code
            else "no estimate yet: the scheduler has not looked at this job",
        )
    need = job.replicas * job.gpus_per_replica
    holding = Job.objects.filter(state__in=HOLDING_STATES, gpu_model=model)
    quota_bound = False
    available = 0
    if job.pending_reason_code == "QUOTA_EXHAUSTED":
        row = Quota.objects.filter(team_id=job.team_id, gpu_model=model).first()
        if row is not None and row.borrowing_limit is not None:
            # Quota blocks it: the team's own jobs on the model give back what it needs.
            quota_bound = True
            holding = holding.filter(team_id=job.team_id)
            used = sum(r * g for r, g in holding.values_list("replicas", "gpus_per_replica"))
            available = row.nominal + row.borrowing_limit - used
    if not quota_bound:
        nodes = Node.objects.filter(
            gpu_model=model, cluster__state=ClusterState.ENABLED, ready=True, schedulable=True
        ).aggregate(alloc=Sum("gpu_allocatable"), others=Sum("gpus_used_by_others"))
        held = sum(
            r * g
            for r, g in holding.filter(cluster__state=ClusterState.ENABLED).values_list(
                "replicas", "gpus_per_replica"
            )
        )
        available = max(0, (nodes["alloc"] or 0) - (nodes["others"] or 0) - held)
    releases = [
        Release(gpus=r * g, by=start + dt.timedelta(seconds=runtime))
        for r, g, start, runtime in holding.annotate(
            since=Coalesce("started_at", "admitted_at", "state_changed_at")
        )
        .order_by("since")
        .values_list("replicas", "gpus_per_replica", "since", "max_runtime_seconds")[:RELEASES_READ]
    ]
    window = dt.timedelta(hours=settings.GPUPOOL_WAIT_WINDOW_HOURS)
    waits = next(
        (
            w
            for w in wait_stats_recent(now=now, window=window, by_team=False)
            if w.gpu_model_id == model.pk
        ),
        None,
    )
    history = (
        WaitHistory(median=dt.timedelta(seconds=waits.p50), jobs=waits.started, window=window)
        if waits
        else WaitHistory(median=dt.timedelta(0), jobs=0, window=window)
    )
    return estimate_start(
        now=now,
        queued_at=job.state_changed_at,
        need=need,
        label=model.key,
        available=available,
        releases=releases,
        history=history,
        quota=quota_bound,
    )
