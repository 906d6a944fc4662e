"""Preemption people can live with: the per-team minimum runtime and grace period, resolved
against the pool's defaults, and the snapshot step that gives young jobs their protection.

The engine only sees ``RunningAllocation.protected_until`` and
``EngineConfig.preemption_budget_gpus``; this module turns team policies and settings into
them, for the cycle and for the what-if preview alike, so both decide with the same rules,
and into the ``PreemptionRules`` the start estimates simulate with.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.conf import settings

from portal.models import PREEMPTIBLE_STATES, Job, Team
from rules import engine
from rules.engine.forecast import PreemptionRules
from scheduling.models import TeamPolicy


def min_runtimes() -> tuple[dt.timedelta, dict[str, dt.timedelta]]:
    """The pool's default minimum runtime and each team's own where its policy names one,
    by team slug."""
    default = dt.timedelta(minutes=settings.GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES)
    own = {
        slug: dt.timedelta(minutes=minutes)
        for slug, minutes in TeamPolicy.objects.filter(
            min_runtime_minutes__isnull=False
        ).values_list("team__slug", "min_runtime_minutes")
    }
    return default, own


def termination_grace_seconds(team: Team) -> int:
    """Seconds the team's pods get between SIGTERM and SIGKILL: its policy's, else the pool's
    default (``GPUPOOL_TERMINATION_GRACE_SECONDS``). Reads ``team.policy``: load it with
    ``select_related("team__policy")`` to spare a query per job."""
    try:
        value = team.policy.termination_grace_seconds
    except TeamPolicy.DoesNotExist:
        value = None
    return int(settings.GPUPOOL_TERMINATION_GRACE_SECONDS if value is None else value)


def forecast_rules() -> PreemptionRules:
    """The rules as the start estimates' simulation applies them to the jobs it starts and
    preempts: each team's minimum runtime and grace period, by team slug."""
    default, own = min_runtimes()
    grace = {
        slug: dt.timedelta(seconds=seconds)
        for slug, seconds in TeamPolicy.objects.filter(
            termination_grace_seconds__isnull=False
        ).values_list("team__slug", "termination_grace_seconds")
    }
    return PreemptionRules(
        min_runtime=default,
        team_min_runtime=own,
        grace=dt.timedelta(seconds=settings.GPUPOOL_TERMINATION_GRACE_SECONDS),
        team_grace=grace,
    )


def protect_young(snapshot: engine.Snapshot) -> engine.Snapshot:
    """The snapshot with ``protected_until`` on every running job still within its team's
    minimum runtime, counted from when its pods started (``Job.started_at``).

    One query over the jobs that started within the longest minimum runtime; a job admitted
    but not started has lost no work yet and gets no protection.
    """
    default, own = min_runtimes()
    longest = max([default, *own.values()])
    if longest <= dt.timedelta(0) or not snapshot.running:
        return snapshot
    now = snapshot.now
    rows = Job.objects.filter(
        state__in=PREEMPTIBLE_STATES, started_at__gt=now - longest
    ).values_list("public_id", "team__slug", "started_at")
    until: dict[str, dt.datetime] = {}
    for public_id, team, started_at in rows:
        end = started_at + own.get(team, default)
        if end > now:
            until[str(public_id)] = end
    if not until:
        return snapshot
    running = tuple(
        dataclasses.replace(a, protected_until=until[a.job_id]) if a.job_id in until else a
        for a in snapshot.running
    )
    return dataclasses.replace(snapshot, running=running)
