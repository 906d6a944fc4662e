"""Start estimates for queued jobs: the inputs of ``engine.forecast`` in a few queries, and
what comes out stored on the jobs (every cycle) or answered for one job or one spec (the API
and the pages).

Each cycle asks for a refresh once it committed (:func:`estimates_request`); the task
(``scheduling.tasks.refresh_estimates_task``) loads a snapshot as the cycle does and calls
:func:`estimates_refresh`, whose simulation's first step is the engine's decision on that
snapshot, so a job the next cycle would admit is estimated "now" by construction. Only
estimates that changed are written.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from portal import hooks
from portal.jobs.blocker import CONFIDENCE, SimulatedStart, StartRange, range_words
from portal.jobs.rowlock import jobs_update_rows
from portal.models import HOLDING_STATES, Job, JobState, Team
from rules import engine
from rules.engine.forecast import (
    Alternative,
    Duration,
    DurationModel,
    Expected,
    Finished,
    JobForecast,
    alternatives,
    forecast,
    name_pattern,
    running_expected,
    shape_of,
)
from rules.engine.reasons import fmt_wait
from scheduling.models import GpuModel
from scheduling.preemption_rules import forecast_rules
from scheduling.snapshot import pool_now

log = logging.getLogger(__name__)

FINISHED_RUNS = 5_000
"""At most this many recent finished runs teach the durations (the newest)."""


@dataclass(frozen=True)
class Inputs:
    """What the simulation needs besides the snapshot."""

    ends: dict[str, Expected]
    durations: dict[str, Duration]
    default: Duration
    model: DurationModel


def _finished_runs(now: dt.datetime) -> list[Finished]:
    since = now - dt.timedelta(days=settings.GPUPOOL_ESTIMATE_HISTORY_DAYS)
    rows = (
        Job.objects.filter(
            state__in=(JobState.SUCCEEDED, JobState.FAILED),
            finished_at__gte=since,
            started_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list(
            "team__slug",
            "kind",
            "name",
            "image",
            "replicas",
            "gpus_per_replica",
            "started_at",
            "finished_at",
        )[:FINISHED_RUNS]
    )
    return [
        Finished(
            team=team,
            kind=kind,
            pattern=name_pattern(name, image),
            runtime=end - start,
            shape=shape_of(replicas, gpus),
        )
        for team, kind, name, image, replicas, gpus, start, end in rows
        if end >= start
    ]


def duration_model(*, now: dt.datetime) -> DurationModel:
    """Median runtimes of the finished runs of the last days (the newest few thousand)."""
    return DurationModel(_finished_runs(now))


def duration_of(model: DurationModel, *, team: str, kind: str, name: str, image: str,
                max_runtime_seconds: int, replicas: int = 1,
                gpus_per_replica: int = 1) -> Duration:  # fmt: skip
    return model.expected(
        team=team,
        kind=kind,
        pattern=name_pattern(name, image),
        max_runtime=dt.timedelta(seconds=max_runtime_seconds),
        shape=shape_of(replicas, gpus_per_replica),
    )


def _running_end(start: dt.datetime, d: Duration, max_runtime: int, now: dt.datetime) -> Expected:
    """When a running job ends, likely between when (``engine.forecast.running_expected``):
    one past what was learned has an unknown end up to its max runtime, not "soon"."""
    return running_expected(
        started=start, duration=d, max_runtime=dt.timedelta(seconds=max_runtime), now=now
    )


def inputs_for(snapshot: engine.Snapshot) -> Inputs:
    """Expected ends of the running jobs and durations of the queued ones of ``snapshot``,
    in one query over the active jobs plus the (cached) finished runs."""
    now = snapshot.now
    model = duration_model(now=now)
    ends: dict[str, Expected] = {}
    durations: dict[str, Duration] = {}
    rows = Job.objects.filter(state__in=(JobState.QUEUED, *HOLDING_STATES)).values_list(
        "public_id",
        "state",
        "team__slug",
        "kind",
        "name",
        "image",
        "max_runtime_seconds",
        "started_at",
        "admitted_at",
        "replicas",
        "gpus_per_replica",
    )
    for row in rows:
        public_id, state, team, kind, name, image, max_runtime, started, admitted, r, g = row
        d = duration_of(
            model,
            team=team,
            kind=kind,
            name=name,
            image=image,
            max_runtime_seconds=max_runtime,
            replicas=r,
            gpus_per_replica=g,
        )
        if state == JobState.QUEUED:
            durations[str(public_id)] = d
        else:
            ends[str(public_id)] = _running_end(started or admitted or now, d, max_runtime, now)
    default = Duration(expected=dt.timedelta(hours=1), basis="a one-hour guess (job unknown)")
    return Inputs(ends=ends, durations=durations, default=default, model=model)


def _limits() -> dict[str, Any]:
    """The simulation's bounds, and the preemption rules it applies to what it starts."""
    return {
        "horizon": dt.timedelta(hours=settings.GPUPOOL_ESTIMATE_HORIZON_HOURS),
        "max_steps": settings.GPUPOOL_ESTIMATE_MAX_STEPS,
        "rules": forecast_rules(),
    }


def _beyond_lookback() -> str:
    return (
        f"no estimate: it is beyond the first {settings.GPUPOOL_SCHEDULER_LOOKBACK} queued jobs "
        "of its team that the scheduler looks at; it gets one as those ahead of it start"
    )


def estimates_refresh(
    *,
    snapshot: engine.Snapshot,
    config: engine.EngineConfig,
    job_pk: Mapping[str, int],
    decision: engine.Decision | None = None,
) -> int:
    """Recompute every queued job's estimate from ``snapshot`` (``decision``: the engine's on
    it, when already made) and store those that changed; returns how many rows changed."""
    now = snapshot.now
    inputs = inputs_for(snapshot)
    result = forecast(
        snapshot,
        config,
        ends=inputs.ends,
        durations=inputs.durations,
        default=inputs.default,
        first=decision,
        **_limits(),
    )
    by_pk = {job_pk[j]: f for j, f in result.jobs.items() if j in job_pk}
    changed: dict[int, Estimate] = {}
    ranged: dict[int, Estimate] = {}
    for pk, *old in Job.objects.filter(state=JobState.QUEUED).values_list(
        "pk", "estimated_start_at", "estimate_model", "estimate_cluster", "estimate_note"
    ):
        f = by_pk.get(pk)
        new = (
            Estimate(f.start, f.model, f.cluster, f.why, f.earliest, f.latest, f.runs, f.unknown)
            if f is not None
            else Estimate(None, "", "", _beyond_lookback())
        )
        if new[:4] != tuple(old):
            changed[pk] = new
        ranged[pk] = new
    stored = estimates_store(changed, now=now)
    # The ranges and each job's first estimate are kept by the dashboards wing (calibration):
    # every queued job's, as a range moves without the point or note moving. One statement
    # there, in this task, nothing on the submit or the cycle.
    hooks.estimates_refreshed.fire_on_commit(ranged, now)
    log.info("estimates: %d changed, %d simulation steps", stored, result.steps)
    return stored


def start_now(job: Job, now: dt.datetime) -> SimulatedStart | None:
    """A queued job's start computed for it alone (None for any other state): the refresh's
    simulation, from the pool now, stopped once this job starts.

    What a page or the API shows before the refresh that follows each cycle has stored an
    estimate on the job (``portal.hooks.start_estimate``), so that there is one estimator,
    not a quicker one that restated quota and capacity and could disagree with it. Asked
    only for one job's page or API answer, never for a list."""
    if job.state != JobState.QUEUED:
        return None
    # A page polls every few seconds and a deep queue's simulation takes a while: one
    # answer serves them until the refresh stores the estimate (or for START_NOW_TTL).
    key = f"scheduling:start-now:{job.pk}:{job.state_changed_at.timestamp()}"
    found = cache.get(key)
    if found is None:
        found = _start_now(job, now)
        cache.set(key, found, timeout=START_NOW_TTL)
    return found


START_NOW_TTL = 15
"""Seconds one job's own simulated start is reused (its page's live part polls every 5 s)."""


def _start_now(job: Job, now: dt.datetime) -> SimulatedStart:
    snapshot, config = pool_now()
    pending = _pending_of(job, snapshot)
    if pending is None:
        return SimulatedStart(at=None, basis=_beyond_lookback(), source="none", now=now)
    f = _forecast_until(snapshot, config, pending.id, inputs_for(snapshot))
    return SimulatedStart(
        at=f.start,
        basis=f.why,
        model=f.model,
        cluster=f.cluster,
        range=StartRange(f.earliest, f.latest, f.runs, f.unknown),
        now=now,
    )


def _pending_of(job: Job, snapshot: engine.Snapshot) -> engine.PendingJob | None:
    """``job`` as the engine sees it; None when it is beyond the lookback, so not simulated."""
    job_id = str(job.public_id)
    return next((p for p in snapshot.pending if p.id == job_id), None)


def _forecast_until(
    snapshot: engine.Snapshot,
    config: engine.EngineConfig,
    job_id: str,
    inputs: Inputs,
    durations: Mapping[str, Duration] | None = None,
) -> JobForecast:
    """The refresh's simulation stopped once ``job_id`` starts: the page's answer and the
    stored estimate come from the same run, so they cannot disagree."""
    return forecast(
        snapshot,
        config,
        until=job_id,
        ends=inputs.ends,
        durations=inputs.durations if durations is None else durations,
        default=inputs.default,
        **_limits(),
    ).jobs[job_id]


class Estimate(NamedTuple):
    """What a queued job's row says of its start (``Job.estimated_start_at`` and the rest),
    and the likely range kept beside it (``dashboards.models.StartEstimateRecord``)."""

    start: dt.datetime | None
    model: str
    cluster: str
    note: str
    earliest: dt.datetime | None = None
    latest: dt.datetime | None = None
    runs: int = 0
    unknown: bool = False


def estimates_store(estimates: Mapping[int, Estimate], *, now: dt.datetime) -> int:
    """Write ``estimates`` (job pk → estimate) onto those of their jobs still queued, in one
    statement; returns how many rows it wrote.

    Rows another transaction holds are skipped, not waited for (``SKIP LOCKED``): the cycle's
    persist locks admissions, then reasons, in two statements, so no single order of this
    write could keep it out of a deadlock with the cycle (9 in 6 runs of a fault soak, when it
    wrote in descending id order). A row skipped keeps its last estimate until the next
    refresh, which the cycle that held it asks for once it commits. The rest are locked in id
    order (``portal.jobs.rowlock``).
    """
    rows = [
        {
            "id": pk,
            "estimated_start_at": e.start,
            "estimate_model": e.model,
            "estimate_cluster": e.cluster,
            "estimate_note": e.note,
            "estimate_updated_at": now,
        }
        for pk, e in estimates.items()
    ]
    return jobs_update_rows(rows, where={"state": JobState.QUEUED}, skip_locked=True)


REQUESTED_KEY = "scheduling:estimates-requested"
RUNNING_KEY = "scheduling:estimates-running"
TASK = "scheduling.refresh_estimates"


def estimates_request() -> None:
    """The cycle's step 6: once it commits, ask for the estimates to be recomputed.

    In a task of its own, not in the cycle: the simulation replays many engine decisions
    (seconds at ten thousand queued jobs), and the cycle admits every few hundred
    milliseconds. Requests made while one is queued are one (coalesced); best effort like
    ``cycle_request``: a lost request leaves the previous estimates until the next cycle.
    """

    def send() -> None:
        try:
            if cache.add(REQUESTED_KEY, 1, timeout=60):
                try:
                    current_app.send_task(TASK)
                except Exception:
                    cache.delete(REQUESTED_KEY)
                    raise
        except Exception:
            log.warning("could not request an estimate refresh", exc_info=True)

    transaction.on_commit(send)


# -- one job, one spec: the API and the pages -------------------------------------------------


def in_words(start: dt.datetime | None, now: dt.datetime) -> str:
    """``now``, ``in ~40m``, ``in ~2d 3h``; empty without a start."""
    if start is None:
        return ""
    if start <= now:
        return "now"
    return f"in ~{fmt_wait(start - now + dt.timedelta(seconds=59))}"


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t else None


def forecast_dict(f: JobForecast, now: dt.datetime, labels: Mapping[str, str]) -> dict[str, Any]:
    r = StartRange(f.earliest, f.latest, f.runs, f.unknown) if f.start else None
    return {
        "start_at": _iso(f.start),
        "earliest": _iso(max(f.earliest, now)) if f.start and f.earliest else None,
        "latest": _iso(f.latest) if f.start else None,
        "confidence": CONFIDENCE if f.start and f.latest else None,
        "comparable_runs": f.runs if f.start else None,
        "unknown": bool(f.start) and f.unknown,
        "summary": range_words(f.start, r, now),
        "starts": in_words(f.start, now),
        "model": f.model,
        "model_name": labels.get(f.model, f.model),
        "cluster": f.cluster,
        "why": f.why,
    }


def alternative_dict(a: Alternative, now: dt.datetime, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "label": labels.get(a.model, a.label) if a.model else a.label,
        "only_model": a.model,
        "replicas": a.replicas,
        **forecast_dict(a.estimate, now, labels),
    }


def sooner_first(alts: list[dict[str, Any]], start: dt.datetime | None) -> list[dict[str, Any]]:
    """The alternatives that would start before the job as asked (or at all, when it has no
    estimate), soonest first and marked ``sooner``; then the rest in their order, which the
    pages and the CLI fold into one line: a table of ways that are no better hides the one
    that is."""

    def at(a: dict[str, Any]) -> dt.datetime | None:
        return dt.datetime.fromisoformat(a["start_at"]) if a["start_at"] else None

    for a in alts:
        mine = at(a)
        a["sooner"] = mine is not None and (start is None or mine < start)
    sooner = sorted((a for a in alts if a["sooner"]), key=lambda a: at(a))
    return sooner + [a for a in alts if not a["sooner"]]


def _answer(
    snapshot: engine.Snapshot,
    config: engine.EngineConfig,
    job: engine.PendingJob,
    duration: Duration,
    inputs: Inputs,
) -> dict[str, Any]:
    """The estimate for ``job`` (in ``snapshot.pending``) and its alternatives."""
    now = snapshot.now
    durations = {**inputs.durations, job.id: duration}
    common: dict[str, Any] = {
        "ends": inputs.ends,
        "durations": durations,
        "default": inputs.default,
        **_limits(),
    }
    labels = dict(GpuModel.objects.values_list("key", "display_name"))
    mine = _forecast_until(snapshot, config, job.id, inputs, durations)
    alts = alternatives(snapshot, job, config, **common)
    return {
        "estimate": forecast_dict(mine, now, labels),
        "expected_runtime_minutes": round(duration.expected.total_seconds() / 60),
        "runtime_basis": duration.basis,
        "alternatives": sooner_first([alternative_dict(a, now, labels) for a in alts], mine.start),
        "computed_at": now.isoformat().replace("+00:00", "Z"),
    }


def job_estimate(
    job: Job, *, snapshot: engine.Snapshot, config: engine.EngineConfig
) -> dict[str, Any]:
    """A queued job's estimate on ``snapshot`` (the pool now), with alternatives; a job in
    another state has none, and says so."""
    if job.state != JobState.QUEUED:
        return {
            "estimate": None,
            "why": f"no estimate: the job is {job.state.lower()}, not queued",
            "alternatives": [],
        }
    pending = _pending_of(job, snapshot)
    if pending is None:
        return {"estimate": None, "why": _beyond_lookback(), "alternatives": []}
    inputs = inputs_for(snapshot)
    duration = inputs.durations.get(pending.id, inputs.default)
    return {"why": "", **_answer(snapshot, config, pending, duration, inputs)}


def spec_estimate(
    *, spec: Any, team: Team, snapshot: engine.Snapshot, config: engine.EngineConfig
) -> dict[str, Any]:
    """The estimate for a job not yet submitted (a validated ``JobSpec``) on ``snapshot``: it
    would join the end of its team's line now."""
    now = snapshot.now
    job = engine.PendingJob(
        id="(this job)",
        team=team.slug,
        submitted_at=now,
        gpus_per_replica=spec.gpus_per_replica,
        replicas=spec.replicas,
        priority=spec.priority,
        requirement=engine.Requirement(
            models=tuple(spec.gpu_models),
            min_memory_gib=float(spec.min_gpu_memory_gib or 0),
            min_tflops_fp16=float(spec.min_fp16_tflops or 0),
            bf16=spec.requires_bf16,
            fp8=spec.requires_fp8,
        ),
        policy=engine.Policy(spec.selection_policy),
        fallback=spec.allow_fallback,
    )
    snapshot = replace(snapshot, pending=(*snapshot.pending, job))
    inputs = inputs_for(snapshot)
    duration = duration_of(
        inputs.model,
        team=team.slug,
        kind=spec.kind,
        name=spec.name,
        image=spec.image,
        max_runtime_seconds=spec.max_runtime_seconds,
        replicas=spec.replicas,
        gpus_per_replica=spec.gpus_per_replica,
    )
    return {"why": "", **_answer(snapshot, config, job, duration, inputs)}
