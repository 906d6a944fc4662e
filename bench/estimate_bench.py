"""Accuracy and cost of the start estimates (``rules.engine.forecast``).

    .venv/bin/python bench/estimate_bench.py [--quick] [--seed N] [--hours H] [--days D]
        [--gpus G] [--first-day F] [--trace both|synthetic|alibaba|none] [--no-cost]

Accuracy, on two traces replayed through the real engine (a cycle at every arrival and every
end, every 5 minutes while anything waits):

- **synthetic**: bursty arrivals, a team mix with deep and shallow queues, recurring job types
  whose runtimes scatter around a mean, some jobs ending early, max runtimes set generously as
  people do, borrowing and reclaim by preemption under a 10-minute minimum runtime and a
  2-minute grace period;
- **alibaba-gpu-2023**: the production trace in ``../shared/traces/alibaba-gpu-2023/`` (its
  real arrivals, shapes and runtimes: ``creation_time``, ``scheduled_time``,
  ``deletion_time``) on a pool near its peak demand (see :func:`alibaba`).

At each job's submit three estimates of its start are taken from the state of that moment:

- **forecast**: the forward simulation, running jobs ending at the runtime learned from the
  finished runs so far (same team and name pattern, the team's jobs, the pool's jobs of that
  shape, each shrunk toward the wider), bounded by max runtime; with its likely range;
- **history**: submit time plus the median wait of the last jobs started on its first
  candidate model (the "usual wait" a dashboard shows);
- **slurm**: the same simulation with every job lasting its max runtime, as Slurm's
  ``squeue --start`` plans with time limits.

Each is compared with the job's actual first start: median and P90 absolute error, the share
of starts inside the range shown (the forecast's; a start within one 5-minute cycle of it
counts), the share within ±10 minutes, and how many got no estimate.

Cost: one whole-queue estimate (every queued job) at 10,000 queued jobs over 2,000 nodes, the
pool of ``bench/engine_bench.py``, timed as the refresh task runs it (CPU and wall).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import math
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine_bench import in_line_order, make_pending, make_pool  # noqa: E402

from rules.engine import (  # noqa: E402
    Cluster,
    EngineConfig,
    GpuModel,
    Node,
    PendingJob,
    Policy,
    Quota,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
    decide,
    resolve_candidates,
    running_allocation,
)
from rules.engine.forecast import (  # noqa: E402
    Duration,
    DurationModel,
    Expected,
    Finished,
    PreemptionRules,
    forecast,
    running_expected,
    shape_of,
)

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
MODELS = (
    GpuModel(key="t4", name="T4", cost_factor=1.0, tflops_fp16=65, memory_gib=16),
    GpuModel(key="l4", name="L4", cost_factor=1.5, tflops_fp16=121, memory_gib=24, bf16=True),
    GpuModel(
        key="a100-80gb", name="A100", cost_factor=4.0, tflops_fp16=312, memory_gib=80, bf16=True
    ),
)
# (model, nodes per cluster, GPUs per node), two clusters.
SHAPE = (("t4", 6, 4), ("l4", 5, 8), ("a100-80gb", 6, 8))
CLUSTERS = ("east", "west")
TEAMS = 6
KIND = "training"
TICK = timedelta(minutes=5)  # beat's cycle while anything waits (the starvation guard's clock)
RULES = PreemptionRules(min_runtime=timedelta(minutes=10), grace=timedelta(minutes=2))
"""The pool's preemption rules: the world keeps them, and every estimate simulates them."""


@dataclass
class JobType:
    """A recurring job of one team: its requirement, gang, typical runtime and max runtime."""

    team: str
    pattern: str
    requirement: Requirement
    gpus: int
    replicas: int
    mean: timedelta
    max_runtime: timedelta


@dataclass
class TraceJob:
    job: PendingJob
    kind: JobType
    actual: timedelta  # how long it really runs once started (a restart runs it again)


def make_types(rnd: random.Random) -> list[JobType]:
    types = []
    for t in range(TEAMS):
        for k in range(3):
            mean = timedelta(minutes=math.exp(rnd.uniform(math.log(10), math.log(300))))
            limit_hours = math.ceil(mean.total_seconds() * rnd.choice([2, 3, 4, 8]) / 3600)
            if rnd.random() < 0.5:
                req = Requirement(models=tuple(rnd.sample([m.key for m in MODELS], 2)))
            else:
                req = Requirement(min_memory_gib=rnd.choice([0, 20, 40]))
            gpus = rnd.choice([1, 1, 2, 4, 8])
            types.append(
                JobType(
                    team=f"team-{t}",
                    pattern=f"team-{t}-job-{k}",
                    requirement=req,
                    gpus=min(gpus, 4) if req.models and "t4" in req.models else gpus,
                    replicas=rnd.choice([1, 1, 1, 2]) if gpus >= 4 else 1,
                    mean=mean,
                    max_runtime=timedelta(hours=limit_hours),
                )
            )
    return types


def actual_runtime(rnd: random.Random, jt: JobType) -> timedelta:
    """Noise around the type's mean; one job in ten ends early (a crash, a converged run)."""
    runtime = jt.mean * rnd.lognormvariate(0, 0.35)
    if rnd.random() < 0.1:
        runtime *= rnd.uniform(0.05, 0.5)
    return max(timedelta(minutes=1), min(runtime, jt.max_runtime))


def make_trace(rnd: random.Random, types: list[JobType], hours: float) -> list[TraceJob]:
    """Bursty arrivals: a day-shaped rate, plus bursts of one team's sweeps."""
    out: list[TraceJob] = []
    t = T0
    end = T0 + timedelta(hours=hours)
    weights = [1.0 / (i % TEAMS + 1) ** 0.8 for i in range(len(types))]
    n = 0
    while t < end:
        hour = (t - T0).total_seconds() / 3600
        rate = 30 * (1.0 + 0.6 * math.sin(hour / 24 * 2 * math.pi))  # jobs per hour
        t += timedelta(hours=rnd.expovariate(rate))
        jt = rnd.choices(types, weights=weights)[0]
        burst = rnd.choice([1, 1, 1, 1, 3, 6])
        for _ in range(burst):
            out.append(
                TraceJob(
                    job=PendingJob(
                        id=f"j{n:05}",
                        team=jt.team,
                        submitted_at=t,
                        gpus_per_replica=jt.gpus,
                        replicas=jt.replicas,
                        priority=0,
                        requirement=jt.requirement,
                        policy=Policy.CHEAPEST,
                    ),
                    kind=jt,
                    actual=actual_runtime(rnd, jt),
                )
            )
            n += 1
    return out


def make_pool_small(rnd: random.Random) -> Snapshot:
    teams = tuple(Team(id=f"team-{i}", weight=1.0, cohort=f"cohort-{i % 2}") for i in range(TEAMS))
    clusters = tuple(
        Cluster(
            id=c,
            nodes=tuple(
                Node(name=f"{c}-{m}-{i}", model=m, total_gpus=g, free_gpus=g)
                for m, count, g in SHAPE
                for i in range(count)
            ),
        )
        for c in CLUSTERS
    )
    quotas = []
    for m, count, g in SHAPE:
        capacity = count * g * len(CLUSTERS)
        shares = [rnd.uniform(0.5, 1.5) for _ in teams]
        for team, share in zip(teams, shares, strict=True):
            quotas.append(Quota(team=team.id, model=m, nominal=int(capacity * share / sum(shares))))
    return Snapshot(now=T0, models=MODELS, teams=teams, quotas=tuple(quotas), clusters=clusters)


@dataclass
class Held:
    alloc: RunningAllocation
    actual_end: datetime
    trace: TraceJob
    preempted: bool = False
    """Being preempted: it ends at the end of its grace period and goes back in line."""


class World:
    """The pool as it really goes: the engine decides at every arrival and end."""

    def __init__(self, base: Snapshot, config: EngineConfig) -> None:
        self.base = base
        self.config = config
        self.free = {(c.id, n.name, n.model): n.free_gpus for c in base.clusters for n in c.nodes}
        self.running: dict[str, Held] = {}
        self.ends: list[tuple[datetime, str]] = []
        self.pending: dict[str, TraceJob] = {}
        self.started: dict[str, datetime] = {}
        self.finished: list[Finished] = []
        self.waits: dict[str, deque[float]] = {}
        self.preemptions = 0

    def snapshot(self, now: datetime) -> Snapshot:
        clusters = tuple(
            replace(
                c,
                nodes=tuple(
                    replace(n, free_gpus=self.free[(c.id, n.name, n.model)]) for n in c.nodes
                ),
            )
            for c in self.base.clusters
        )
        return replace(
            self.base,
            now=now,
            clusters=clusters,
            running=tuple(h.alloc for h in self.running.values()),
            pending=tuple(tj.job for tj in self.pending.values()),
        )

    def _give_back(self, alloc: RunningAllocation) -> None:
        for node in alloc.nodes:
            self.free[(alloc.cluster, node, alloc.model)] += alloc.gpus_per_replica

    def end_due(self, now: datetime) -> None:
        while self.ends and self.ends[0][0] <= now:
            end, job_id = heapq.heappop(self.ends)
            held = self.running.get(job_id)
            if held is None or held.actual_end != end:
                continue
            del self.running[job_id]
            self._give_back(held.alloc)
            if held.preempted:
                self.pending[job_id] = held.trace  # requeued, same submit time
                continue
            jt = held.trace.kind
            self.finished.append(
                Finished(
                    team=jt.team,
                    kind=KIND,
                    pattern=jt.pattern,
                    runtime=end - held.alloc.started_at,
                    shape=shape_of(jt.replicas, jt.gpus),
                )
            )

    def cycle(self, now: datetime) -> None:
        d = decide(self.snapshot(now), self.config)
        for p in d.preemptions:
            held = self.running.get(p.job_id)
            if held is not None and not held.preempted:
                # SIGTERM: it keeps its GPUs through its grace period, then is requeued
                # (unless it ends of itself first).
                held.alloc = replace(held.alloc, preempting=True)
                gone = now + RULES.release_after(p.team)
                if gone < held.actual_end:
                    held.preempted = True
                    held.actual_end = gone
                    heapq.heappush(self.ends, (gone, p.job_id))
                self.preemptions += 1
        for a in d.admissions:
            tj = self.pending.pop(a.job_id)
            alloc = running_allocation(
                a.job_id, tj.job.team, a.cluster, a.model, len(a.node_plan),
                a.gpus_per_replica, 0, now, a.node_plan, False,
                RULES.protected_until(tj.job.team, now),
            )  # fmt: skip
            for node in a.node_plan:
                self.free[(a.cluster, node, a.model)] -= a.gpus_per_replica
            end = now + tj.actual
            self.running[a.job_id] = Held(alloc, end, tj)
            heapq.heappush(self.ends, (end, a.job_id))
            if a.job_id not in self.started:
                self.started[a.job_id] = now
                wait = (now - tj.job.submitted_at).total_seconds()
                self.waits.setdefault(a.model, deque(maxlen=50)).append(wait)

    def next_end(self) -> datetime | None:
        while self.ends:
            end, job_id = self.ends[0]
            held = self.running.get(job_id)
            if held is not None and held.actual_end == end:
                return end
            heapq.heappop(self.ends)
        return None


Estimates = dict[str, tuple[datetime | None, datetime | None, datetime | None]]
"""Per estimate: (point, soonest, latest) of one job's start; a baseline has no range."""


def expected_of(model: DurationModel, jt: JobType) -> Duration:
    return model.expected(
        team=jt.team,
        kind=KIND,
        pattern=jt.pattern,
        max_runtime=jt.max_runtime,
        shape=shape_of(jt.replicas, jt.gpus),
    )


def estimates_at_submit(
    world: World, tj: TraceJob, now: datetime, history: list[Finished]
) -> Estimates:
    """The three estimates of ``tj``'s start from the world as it is at its submit."""
    snap = world.snapshot(now)
    model = DurationModel(history + world.finished)
    ends, durations, slurm_ends, slurm_durations = {}, {}, {}, {}
    for job_id, h in world.running.items():
        jt = h.trace.kind
        ends[job_id] = running_expected(
            started=h.alloc.started_at,
            duration=expected_of(model, jt),
            max_runtime=jt.max_runtime,
            now=now,
        )
        slurm_ends[job_id] = Expected(end=h.alloc.started_at + jt.max_runtime, basis="")
    for job_id, q in world.pending.items():
        durations[job_id] = expected_of(model, q.kind)
        slurm_durations[job_id] = Duration(expected=q.kind.max_runtime, basis="")
    default = Duration(expected=timedelta(hours=1), basis="")
    common = {"until": tj.job.id, "default": default, "max_steps": 400, "rules": RULES}
    ours = forecast(snap, world.config, ends=ends, durations=durations, **common).jobs[tj.job.id]
    slurm = forecast(snap, world.config, ends=slurm_ends, durations=slurm_durations, **common)
    first = resolve_first(tj)
    waits = world.waits.get(first) or [w for q in world.waits.values() for w in q]
    hist = now + timedelta(seconds=statistics.median(waits)) if waits else None
    return {
        "forecast": (ours.start, ours.earliest, ours.latest),
        "history": (hist, None, None),
        "slurm": (slurm.jobs[tj.job.id].start, None, None),
    }


def resolve_first(tj: TraceJob, models: tuple[GpuModel, ...] = MODELS) -> str:
    matched = resolve_candidates(tj.job.requirement, tj.job.policy, models).matched
    return matched[0].key if matched else ""


def seed_history(rnd: random.Random, types: list[JobType]) -> list[Finished]:
    """What the portal has already seen finish: a few runs of each job type."""
    return [
        Finished(
            team=jt.team,
            kind=KIND,
            pattern=jt.pattern,
            runtime=actual_runtime(rnd, jt),
            shape=shape_of(jt.replicas, jt.gpus),
        )
        for jt in types
        for _ in range(rnd.randint(0, 8))
    ]


@dataclass
class Scenario:
    """A trace and the pool it runs on."""

    title: str
    pool: Snapshot
    trace: list[TraceJob]
    history: list[Finished]
    config: EngineConfig
    models: tuple[GpuModel, ...] = MODELS
    note: str = ""


def synthetic(seed: int, hours: float) -> Scenario:
    rnd = random.Random(seed)
    types = make_types(rnd)
    trace = make_trace(rnd, types, hours)
    history = seed_history(rnd, types)
    config = EngineConfig(starvation_wait=timedelta(hours=2))
    gpus = sum(c * g for _, c, g in SHAPE) * len(CLUSTERS)
    return Scenario(
        f"synthetic: {len(trace)} jobs over {hours:g} h on {gpus} GPUs",
        make_pool_small(rnd),
        trace,
        history,
        config,
    )


# -- the production trace ---------------------------------------------------------------------

TRACE_DIR = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"
TRACE_MAX_RUNTIME = timedelta(hours=24)
"""The trace has no time limits: every job gets the portal's default max runtime (1,440 min),
and a run longer than that is stopped there, as the portal would."""
TRACE_QOS_TEAMS = {"LS": "latency-sensitive", "BE": "best-effort"}
"""The trace has no teams: its QoS classes are the teams (the rest are one "other" team)."""


def alibaba(days: float, gpus: int, seed: int, first_day: float = 135.0) -> Scenario:
    """The Alibaba GPU trace (``openb_pod_list_default.csv``): every GPU pod scheduled in
    ``[first_day, first_day + days)`` with its real arrival (``creation_time``), shape and
    runtime (``deletion_time - scheduled_time``), on a pool of about ``gpus`` GPUs drawn from
    the trace's node list in its model mix. The real cluster (6,212 GPUs) never made these
    pods wait; a pool near their peak demand does, which is what an estimate is for. A GPU
    share is a whole GPU here (the engine places whole GPUs). The runs of the days before
    ``first_day`` are the history the portal would have learned from. The name pattern of a
    pod is its request (CPU, memory, GPUs): the trace's names are serial numbers."""
    import csv

    nodes = list(csv.DictReader((TRACE_DIR / "openb_node_list_gpu_node.csv").open()))
    pods = list(csv.DictReader((TRACE_DIR / "openb_pod_list_default.csv").open()))
    rnd = random.Random(seed)
    rnd.shuffle(nodes)
    picked, total = [], 0
    for n in nodes:
        if total >= gpus:
            break
        picked.append(n)
        total += int(n["gpu"])
    by_model: dict[str, list[int]] = {}
    for n in picked:
        by_model.setdefault(n["model"], []).append(int(n["gpu"]))
    models = tuple(
        GpuModel(key=m.lower(), name=m, cost_factor=1.0, tflops_fp16=100, memory_gib=32)
        for m in sorted(by_model)
    )
    cluster = Cluster(
        id="trace",
        nodes=tuple(
            Node(name=f"{m.lower()}-{i}", model=m.lower(), total_gpus=g, free_gpus=g)
            for m, sizes in sorted(by_model.items())
            for i, g in enumerate(sizes)
        ),
    )
    team_ids = sorted({*TRACE_QOS_TEAMS.values(), "other"})
    teams = tuple(Team(id=t, weight=1.0, cohort="pool") for t in team_ids)
    quotas = tuple(
        Quota(team=t, model=m.key, nominal=sum(by_model[m.name]) // len(team_ids) + 1)
        for t in team_ids
        for m in models
    )
    begin = first_day * 86400
    stop = begin + days * 86400
    types: dict[tuple[str, str], JobType] = {}
    trace: list[TraceJob] = []
    history: list[Finished] = []
    for row in pods:
        if not row["scheduled_time"] or int(row["num_gpu"]) < 1:
            continue
        created = int(row["creation_time"])
        runtime = timedelta(seconds=int(row["deletion_time"]) - int(row["scheduled_time"]))
        runtime = max(timedelta(seconds=1), min(runtime, TRACE_MAX_RUNTIME))
        gpus_per = int(row["num_gpu"]) if int(row["gpu_milli"]) >= 1000 else 1
        team = TRACE_QOS_TEAMS.get(row["qos"], "other")
        pattern = f"{row['cpu_milli']}m-{row['memory_mib']}Mi-{row['num_gpu']}x{row['gpu_milli']}"
        jt = types.setdefault(
            (team, pattern),
            JobType(
                team=team,
                pattern=pattern,
                requirement=Requirement(),
                gpus=gpus_per,
                replicas=1,
                mean=timedelta(0),
                max_runtime=TRACE_MAX_RUNTIME,
            ),
        )
        if created < begin:
            if int(row["deletion_time"]) < begin:
                history.append(
                    Finished(
                        team=team,
                        kind=KIND,
                        pattern=pattern,
                        runtime=runtime,
                        shape=f"1x{gpus_per}",
                    )
                )
            continue
        if created >= stop:
            continue
        at = T0 + timedelta(seconds=created - begin)
        trace.append(
            TraceJob(
                job=PendingJob(
                    id=row["name"],
                    team=team,
                    submitted_at=at,
                    gpus_per_replica=gpus_per,
                    replicas=1,
                    priority=0,
                    requirement=Requirement(),
                    policy=Policy.CHEAPEST,
                ),
                kind=jt,
                actual=runtime,
            )
        )
    snap = Snapshot(now=T0, models=models, teams=teams, quotas=quotas, clusters=(cluster,))
    shown = ", ".join(f"{sum(v)} {k}" for k, v in sorted(by_model.items()))
    return Scenario(
        f"alibaba-gpu-2023: {len(trace)} GPU pods of days {first_day:g}-{first_day + days:g} "
        f"on {total} GPUs ({shown})",
        snap,
        trace,
        history,
        EngineConfig(starvation_wait=timedelta(hours=2)),
        models,
    )


Errors = dict[str, list[tuple[float, float, bool | None]]]
"""Per estimate: (absolute error, actual wait) in minutes of each started job, and whether the
start was inside the shown range (None: no range)."""


def replay(sc: Scenario) -> tuple[Errors, dict[str, int], int, int]:
    world = World(sc.pool, sc.config)
    estimates: dict[str, Estimates] = {}
    arrivals = deque(sorted(sc.trace, key=lambda tj: (tj.job.submitted_at, tj.job.id)))
    last = arrivals[-1].job.submitted_at if arrivals else T0
    now = T0
    while arrivals or world.pending or world.running:
        candidates = [t for t in (world.next_end(),) if t is not None]
        if arrivals:
            candidates.append(arrivals[0].job.submitted_at)
        if world.pending:
            candidates.append(now + TICK)
        if not candidates:
            break
        now = max(now, min(candidates))
        world.end_due(now)
        while arrivals and arrivals[0].job.submitted_at <= now:
            tj = arrivals.popleft()
            world.pending[tj.job.id] = tj
            estimates[tj.job.id] = estimates_at_submit(world, tj, now, sc.history)
        world.cycle(now)
        if now > last + (last - T0) * 20 + timedelta(days=2):  # stuck: stop, say so below
            break
    errors: Errors = {k: [] for k in ("forecast", "history", "slurm")}
    missing = dict.fromkeys(errors, 0)
    for tj in sc.trace:
        actual = world.started.get(tj.job.id)
        if actual is None:
            continue
        wait = (actual - tj.job.submitted_at).total_seconds() / 60
        for name, (at, soonest, latest) in estimates[tj.job.id].items():
            if at is None:
                missing[name] += 1
                continue
            inside = (
                None
                if soonest is None or latest is None
                else soonest - TICK <= actual <= latest + TICK
            )
            errors[name].append((abs((at - actual).total_seconds()) / 60, wait, inside))
    return errors, missing, len(sc.trace), world.preemptions


def _p90(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def accuracy(sc: Scenario) -> dict[str, float]:
    """Replay ``sc`` and print the table; returns the figures of the jobs that waited."""
    began = time.perf_counter()
    errors, missing, n, preempted = replay(sc)
    started = len(errors["forecast"]) + missing["forecast"]
    waits = [w for _, w, _ in errors["forecast"]]
    print(
        f"{sc.title}: {started} started, {preempted} preemptions, median actual wait "
        f"{statistics.median(waits) if waits else 0:.0f} min, "
        f"{sum(1 for w in waits if w > 0) / max(1, len(waits)):.0%} waited "
        f"({time.perf_counter() - began:.0f} s)"
    )
    figures: dict[str, float] = {}
    for title, keep in (("every job", lambda w: True), ("jobs that waited", lambda w: w > 0)):
        print(f"  {title}:")
        print(
            f"    {'estimate':<10} {'median |err|':>13} {'P90 |err|':>11} {'in range':>9} "
            f"{'within ±10 min':>15} {'no estimate':>12}"
        )
        for name, all_rows in errors.items():
            rows = [r for r in all_rows if keep(r[1])]
            errs = [e for e, _, _ in rows]
            med = statistics.median(errs) if errs else float("nan")
            p90 = _p90(errs)
            ranged = [i for _, _, i in rows if i is not None]
            inside = f"{sum(ranged) / len(ranged):.0%}" if ranged else "-"
            ten = sum(1 for e in errs if e <= 10) / max(1, len(errs))
            figures[f"{name}:{title}"] = med
            if ranged:
                figures[f"inside:{title}"] = sum(ranged) / len(ranged)
            print(
                f"    {name:<10} {med:>9.1f} min {p90:>7.0f} min {inside:>9} {ten:>15.0%} "
                f"{missing[name]:>12}"
            )
    key = "jobs that waited"
    ours = figures[f"forecast:{key}"]
    better = min(figures[f"history:{key}"], figures[f"slurm:{key}"])
    ratio = better / ours if ours else float("inf")
    print(
        f"  jobs that waited: the better baseline's median error is {ratio:.1f}x the "
        f"forecast's (goal: >= 2x); {figures.get(f'inside:{key}', 0):.0%} of their starts "
        "inside the shown range (goal: 80-95 %)"
    )
    return {
        "ratio": ratio,
        "inside": figures.get(f"inside:{key}", float("nan")),
        "inside_all": figures.get("inside:every job", float("nan")),
        "jobs": float(n),
    }


def cost(queued: int, repeat: int) -> float:
    """One whole-queue estimate at ``queued`` jobs over the engine bench's 2,000 nodes."""
    spec = yaml.safe_load((ROOT / "bench/scenarios/engine.yaml").read_text())
    pool = make_pool(spec, spec["seed"])
    pending = in_line_order(make_pending(spec, pool.teams, queued, spec["seed"] + 1))
    rnd = random.Random(7)
    snap = replace(pool, pending=pending)
    now = pool.now
    ends = {
        a.job_id: Expected(end=now + timedelta(minutes=rnd.randint(1, 600)), basis="")
        for a in pool.running
    }
    durations = {
        j.id: Duration(expected=timedelta(minutes=rnd.randint(5, 600)), basis="") for j in pending
    }
    default = Duration(expected=timedelta(hours=1), basis="")
    best_cpu, best_wall, steps, estimated = math.inf, math.inf, 0, 0
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        c0, w0 = time.process_time(), time.perf_counter()
        result = forecast(snap, ends=ends, durations=durations, default=default, max_steps=200)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        gc.enable()
        steps = result.steps
        estimated = sum(1 for f in result.jobs.values() if f.start is not None)
    nodes = sum(len(c.nodes) for c in pool.clusters)
    print(
        f"whole-queue estimate: {queued:,} queued, {len(pool.running):,} running, {nodes:,} "
        f"nodes: {best_cpu:.2f} s CPU ({best_wall:.2f} s wall), {steps} engine decisions, "
        f"{estimated:,} jobs estimated (goal: < 1 s)"
    )
    return best_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short traces, 1,000 queued")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--hours", type=float, default=None, help="synthetic trace (default 24)")
    parser.add_argument("--days", type=float, default=None, help="production trace (default 14)")
    parser.add_argument("--gpus", type=int, default=16, help="production trace's pool (~GPUs)")
    parser.add_argument(
        "--first-day", type=float, default=135.0, help="production trace: first day replayed"
    )
    parser.add_argument("--queued", type=int, default=None, help="cost case (default 10,000)")
    parser.add_argument(
        "--trace",
        choices=("both", "synthetic", "alibaba", "none"),
        default="both",
        help="which traces (none: the cost case only)",
    )
    parser.add_argument("--no-cost", action="store_true", help="skip the whole-queue cost case")
    args = parser.parse_args(argv)
    hours = args.hours or (6 if args.quick else 24)
    days = args.days or (1 if args.quick else 14)
    queued = args.queued or (1000 if args.quick else 10_000)
    if args.trace in ("both", "synthetic"):
        accuracy(synthetic(args.seed, hours))
    if args.trace in ("both", "alibaba"):
        accuracy(alibaba(days, args.gpus, args.seed, args.first_day))
    if not args.no_cost:
        cost(queued, repeat=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
