"""When each queued job would start: a forward simulation of the engine over expected runtimes.

:func:`forecast` replays :func:`rules.engine.decide` through time from one snapshot. At each
step the engine decides as it would in a real cycle (priority, fair share, quota, borrowing,
reclaim by preemption, gangs, the starvation guard); what it admits starts then and runs for
its expected duration; then time jumps to the next expected end of a running job, its GPUs come
back, and the engine decides again. No new arrivals are assumed. A job's estimate is the
simulated instant it was admitted, with the model and cluster it got.

Expected durations come from :class:`DurationModel`: the median runtime of finished jobs of the
same team, kind and name/image pattern, falling back to wider groups, always bounded by the
job's max runtime; each carries its basis in words so an estimate can say what it rests on.

:func:`alternatives` runs the same simulation once per candidate model (and with fewer
replicas) for one job or an unsubmitted spec, stopping as soon as that job starts.

Pure (standard library and the engine only): the cycle feeds it the snapshot it just decided on.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rules.engine.candidates import resolve_candidates
from rules.engine.core import DEFAULT_CONFIG, decide
from rules.engine.decision import Decision
from rules.engine.durations import (
    MIN_RUNS,
    NO_HISTORY_FLOOR,
    Duration,
    DurationModel,
    Expected,
    Finished,
    name_pattern,
    running_expected,
    shape_of,
)
from rules.engine.forecast_step import decide_step, quota_asks
from rules.engine.index import books_of
from rules.engine.reasons import count, fmt_wait
from rules.engine.simulation import (
    MAY_MOVE,
    NO_RULES,
    PREEMPTED,
    PREEMPTING_END,
    FreeGpus,
    JobForecast,
    Opened,
    PreemptionRules,
    Sim,
    advance,
    in_lines,
    start_admitted,
    state_at,
)
from rules.engine.snapshot import (
    ClusterState,
    EngineConfig,
    PendingJob,
    Policy,
    Snapshot,
)

__all__ = [
    "MAY_MOVE",
    "MIN_RUNS",
    "NO_HISTORY_FLOOR",
    "NO_RULES",
    "PREEMPTED",
    "PREEMPTING_END",
    "Alternative",
    "Duration",
    "DurationModel",
    "Expected",
    "Finished",
    "Forecast",
    "JobForecast",
    "PreemptionRules",
    "alternatives",
    "forecast",
    "name_pattern",
    "running_expected",
    "shape_of",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Forecast:
    """Every queued job's estimate, and what the simulation cost."""

    jobs: Mapping[str, JobForecast]
    steps: int
    """``decide`` calls made."""
    simulated_until: datetime


def _unstarted(
    job: PendingJob, sim: Sim, stopped: str, now: datetime, last: datetime
) -> JobForecast:
    reason = sim.reasons.get(job.id)
    said = f": {reason.message}" if reason is not None and reason.message else ""
    if stopped == "stuck":
        why = f"no estimate: even after every running job has ended it would not start{said}"
    elif stopped == "horizon":
        why = (
            f"no estimate within the next {fmt_wait(last - now)}: the jobs ahead of it and the "
            f"running ones keep its GPUs at least that long{said}"
        )
    else:
        why = (
            f"no estimate: the simulation stopped at {last:%Y-%m-%d %H:%M} UTC (its step "
            f"budget) before this job's turn{said}"
        )
    return JobForecast(job_id=job.id, start=None, why=why)


def forecast(
    snapshot: Snapshot,
    config: EngineConfig = DEFAULT_CONFIG,
    *,
    ends: Mapping[str, Expected],
    durations: Mapping[str, Duration],
    default: Duration,
    horizon: timedelta = timedelta(days=7),
    quantum: timedelta = timedelta(minutes=1),
    max_steps: int = 400,
    resolution: float = 0.05,
    first: Decision | None = None,
    until: str | None = None,
    worded: bool = False,
    rules: PreemptionRules = NO_RULES,
) -> Forecast:
    """Estimate when each job of ``snapshot.pending`` starts, by replaying the engine.

    ``ends``: per running job, when it is expected to end (a job missing here ends at
    ``started_at + default``); ``durations``: per pending job, how long it runs once started.
    Ends closer together than ``quantum``, or than ``resolution`` times the time simulated so
    far, are one step (an estimate is no finer than that).
    ``first``: the decision already made on ``snapshot`` (the cycle's), reused for step one.
    ``until``: stop as soon as this job starts (what :func:`alternatives` needs).
    ``rules``: the minimum runtime of the jobs it starts and the grace period of those it
    preempts (a job queued now that it starts and then preempts keeps the estimate of its
    first start, and goes back in line for the jobs behind it).
    Stops when every job started, when nothing runs and nothing more can start, past
    ``horizon`` or after ``max_steps`` decisions; jobs left say which.
    """
    now = snapshot.now
    free = FreeGpus(snapshot)
    # Books with no job running yet: each running job is charged as the simulation starts it.
    books = books_of(replace(snapshot, running=()), config, free.capacity)
    sim = Sim(
        free=free,
        running={},
        ends=[],
        pending=in_lines(snapshot.pending),
        quota=books.quota,
        shares=books.shares,
    )
    for a in snapshot.running:
        exp = ends.get(a.job_id)
        if a.preempting:
            end, basis = now + rules.release_after(a.team), "grace period (it is being preempted)"
            sim.spread[a.job_id] = (end, end, 0, False)
        elif exp is not None:
            end, basis = max(exp.end, now), exp.basis
            sim.spread[a.job_id] = (
                max(now, min(end, exp.earliest or end)),
                max(end, exp.latest or end),
                exp.runs,
                exp.outlived,
            )
        else:
            end, basis = max(a.started_at + default.expected, now), default.basis
            sim.spread[a.job_id] = (
                max(now, min(end, a.started_at + (default.low or default.expected))),
                max(end, a.started_at + (default.high or default.expected)),
                default.runs,
                False,
            )
        sim.run(a, end, basis)
        sim.ends.append((end, a.job_id))
        if a.protected_until is not None and now < a.protected_until < end:
            sim.wakes.append(a.protected_until)
    heapq.heapify(sim.ends)
    heapq.heapify(sim.wakes)
    sim.requeue = dict(sim.pending)
    asks = quota_asks(snapshot, snapshot.pending, sim.free.enabled)
    t = now
    steps = 0
    stopped = "done"
    opened = Opened(now, now)
    while sim.pending:
        if first is not None and steps == 0:
            decision = first
        elif worded:
            decision = decide(state_at(snapshot, sim, t), config)
        else:
            state = state_at(snapshot, sim, t, whole=False)
            decision = decide_step(state, config, *asks, sim)
        steps += 1
        start_admitted(sim, decision, t, durations, default, opened, rules)
        sim.reasons.update((r.job_id, r) for r in decision.pending)
        if until is not None and until in sim.done:
            break
        for p in decision.preemptions:
            sim.preempt(p.job_id, t + rules.release_after(p.team))
        if not sim.pending:
            break
        if steps >= max_steps:
            stopped = "budget"
            break
        # Ends within one quantum are one step; far ahead, a step spans ``resolution`` of the
        # distance from now (an estimate 10 h out is no finer than 30 min anyway).
        freed, at = advance(sim, max(quantum, (t - now) * resolution))
        if at is None:
            stopped = "stuck"
            break
        t = max(t, at)
        if t - now > horizon:
            stopped = "horizon"
            break
        opened = Opened(now, t, tuple(freed))
    jobs = dict(sim.done)
    if sim.pending and not worded:  # why the jobs left wait: one worded decision
        last = decide(state_at(snapshot, sim, t), config)
        sim.reasons.update((r.job_id, r) for r in last.pending)
    for job in sim.pending.values():
        if job.id not in jobs:  # one back in line after a preemption keeps its first start
            jobs[job.id] = _unstarted(job, sim, stopped, now, t)
    return Forecast(jobs=jobs, steps=steps, simulated_until=t)


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """What the job would get if it asked differently: one model only, or fewer replicas."""

    label: str
    """E.g. ``"A100-80GB"`` or ``"4 replicas instead of 8"``."""
    model: str
    """The model asked for ('' when any candidate is fine: the replicas variant)."""
    replicas: int
    estimate: JobForecast


def alternatives(
    snapshot: Snapshot,
    job: PendingJob,
    config: EngineConfig = DEFAULT_CONFIG,
    *,
    ends: Mapping[str, Expected],
    durations: Mapping[str, Duration],
    default: Duration,
    horizon: timedelta = timedelta(days=7),
    quantum: timedelta = timedelta(minutes=1),
    max_steps: int = 400,
    rules: PreemptionRules = NO_RULES,
) -> list[Alternative]:
    """The estimate for ``job`` (queued or not yet submitted) on each candidate model its
    requirement allows that some enabled cluster has (a model no cluster offers is no way to
    start, only a simulation to run), and with half and a quarter of its replicas (a gang of
    fewer pods fits sooner). Each variant replaces the job in line, keeping its submit time;
    the simulation stops when the variant starts."""
    variants: list[tuple[str, str, PendingJob]] = []
    present = {
        n.model for c in snapshot.clusters if c.state is ClusterState.ENABLED for n in c.nodes
    }
    models = [
        m
        for m in resolve_candidates(job.requirement, job.policy, snapshot.models).matched
        if m.key in present
    ]
    for m in models:
        only = replace(job.requirement, models=(m.key,))
        variants.append(
            (m.label, m.key, replace(job, requirement=only, policy=Policy.ORDERED, fallback=False))
        )
    r = job.replicas // 2
    while r >= 1 and len(variants) < len(models) + 2:
        variants.append(
            (f"{count(r, 'replica')} instead of {job.replicas}", "", replace(job, replicas=r))
        )
        r //= 2
    others = tuple(p for p in snapshot.pending if p.id != job.id)
    out: list[Alternative] = []
    for label, model, variant in variants:
        result = forecast(
            replace(snapshot, pending=(*others, variant)),
            config,
            ends=ends,
            durations=durations,
            default=default,
            horizon=horizon,
            quantum=quantum,
            max_steps=max_steps,
            until=job.id,
            rules=rules,
        )
        out.append(
            Alternative(
                label=label, model=model, replicas=variant.replicas, estimate=result.jobs[job.id]
            )
        )
    return out
