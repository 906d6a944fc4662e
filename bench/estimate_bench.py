"""Accuracy and cost of the start estimates (``scheduling.engine.forecast``).

    .venv/bin/python bench/estimate_bench.py [--quick] [--seed N] [--hours H]

Accuracy: a synthetic but realistic trace (bursty arrivals, a team mix with deep and shallow
queues, recurring job types whose runtimes scatter around a mean, some jobs ending early, max
runtimes set generously as people do, borrowing and reclaim by preemption under a 10-minute
minimum runtime and a 2-minute grace period) is replayed through the real engine, a cycle at
every arrival and every end. At each job's submit three
estimates of its start are taken from the state of that moment:

- **forecast**: the forward simulation, running jobs ending at the runtime learned from the
  finished runs so far (same team, kind, name pattern), bounded by max runtime;
- **history**: submit time plus the median wait of the last jobs started on its first
  candidate model (the "usual wait" a dashboard shows);
- **slurm**: the same simulation with every job lasting its max runtime, as Slurm's
  ``squeue --start`` plans with time limits.

Each is compared with the job's actual first start: median absolute error, the share within
±25 % of the actual wait and within ±10 minutes, and how many got an estimate at all.

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

from scheduling.engine import (  # noqa: E402
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
from scheduling.engine.forecast import (  # noqa: E402
    Duration,
    DurationModel,
    Expected,
    Finished,
    PreemptionRules,
    forecast,
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
            self.finished.append(
                Finished(
                    team=held.trace.kind.team,
                    kind=KIND,
                    pattern=held.trace.kind.pattern,
                    runtime=end - held.alloc.started_at,
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


def estimates_at_submit(
    world: World, tj: TraceJob, now: datetime, history: list[Finished]
) -> dict[str, datetime | None]:
    """The three estimates of ``tj``'s start from the world as it is at its submit."""
    snap = world.snapshot(now)
    model = DurationModel(history + world.finished)
    ends, durations, slurm_ends, slurm_durations = {}, {}, {}, {}
    for job_id, h in world.running.items():
        jt = h.trace.kind
        d = model.expected(team=jt.team, kind=KIND, pattern=jt.pattern, max_runtime=jt.max_runtime)
        end = h.alloc.started_at + d.expected
        if end <= now:  # past its expected runtime: assumed to end soon
            end = min(
                now + d.expected * 0.1 + timedelta(minutes=1), h.alloc.started_at + jt.max_runtime
            )
        ends[job_id] = Expected(end=end, basis="")
        slurm_ends[job_id] = Expected(end=h.alloc.started_at + jt.max_runtime, basis="")
    for job_id, q in world.pending.items():
        jt = q.kind
        durations[job_id] = model.expected(
            team=jt.team, kind=KIND, pattern=jt.pattern, max_runtime=jt.max_runtime
        )
        slurm_durations[job_id] = Duration(expected=jt.max_runtime, basis="")
    default = Duration(expected=timedelta(hours=1), basis="")
    common = {"until": tj.job.id, "default": default, "max_steps": 400, "rules": RULES}
    ours = forecast(snap, world.config, ends=ends, durations=durations, **common)
    slurm = forecast(snap, world.config, ends=slurm_ends, durations=slurm_durations, **common)
    first = resolve_first(tj)
    waits = world.waits.get(first) or [w for q in world.waits.values() for w in q]
    hist = now + timedelta(seconds=statistics.median(waits)) if waits else None
    return {
        "forecast": ours.jobs[tj.job.id].start,
        "history": hist,
        "slurm": slurm.jobs[tj.job.id].start,
    }


def resolve_first(tj: TraceJob) -> str:
    matched = resolve_candidates(tj.job.requirement, tj.job.policy, MODELS).matched
    return matched[0].key if matched else ""


def seed_history(rnd: random.Random, types: list[JobType]) -> list[Finished]:
    """What the portal has already seen finish: a few runs of each job type."""
    return [
        Finished(team=jt.team, kind=KIND, pattern=jt.pattern, runtime=actual_runtime(rnd, jt))
        for jt in types
        for _ in range(rnd.randint(0, 8))
    ]


Errors = dict[str, list[tuple[float, float]]]
"""Per estimate: (absolute error, actual wait) in minutes of each started job."""


def replay(seed: int, hours: float) -> tuple[Errors, dict[str, int], int, int]:
    rnd = random.Random(seed)
    types = make_types(rnd)
    trace = make_trace(rnd, types, hours)
    history = seed_history(rnd, types)
    config = EngineConfig(starvation_wait=timedelta(hours=2))
    world = World(make_pool_small(rnd), config)
    estimates: dict[str, dict[str, datetime | None]] = {}
    arrivals = deque(sorted(trace, key=lambda tj: (tj.job.submitted_at, tj.job.id)))
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
            estimates[tj.job.id] = estimates_at_submit(world, tj, now, history)
        world.cycle(now)
        if now > T0 + timedelta(hours=hours * 20):  # a stuck trace: stop, say so below
            break
    errors: dict[str, list[tuple[float, float]]] = {k: [] for k in ("forecast", "history", "slurm")}
    missing = dict.fromkeys(errors, 0)
    for tj in trace:
        actual = world.started.get(tj.job.id)
        if actual is None:
            continue
        wait = (actual - tj.job.submitted_at).total_seconds() / 60
        for name, at in estimates[tj.job.id].items():
            if at is None:
                missing[name] += 1
                continue
            errors[name].append((abs((at - actual).total_seconds()) / 60, wait))
    return errors, missing, len(trace), world.preemptions


def accuracy(seed: int, hours: float) -> dict[str, float]:
    began = time.perf_counter()
    errors, missing, n, preempted = replay(seed, hours)
    started = len(errors["forecast"]) + missing["forecast"]
    waits = [w for _, w in errors["forecast"]]
    print(
        f"trace: {n} jobs over {hours:g} h on {sum(c * g for _, c, g in SHAPE) * len(CLUSTERS)} "
        f"GPUs, {started} started, {preempted} preemptions, median actual wait "
        f"{statistics.median(waits) if waits else 0:.0f} min, "
        f"{sum(1 for w in waits if w > 0) / max(1, len(waits)):.0%} waited "
        f"({time.perf_counter() - began:.0f} s)"
    )
    figures: dict[str, float] = {}
    for title, keep in (("every job", lambda w: True), ("jobs that waited", lambda w: w > 0)):
        print(f"  {title}:")
        print(
            f"    {'estimate':<10} {'median |err|':>13} {'within ±25%':>12} "
            f"{'within ±10 min':>15} {'no estimate':>12}"
        )
        for name, all_pairs in errors.items():
            pairs = [(e, w) for e, w in all_pairs if keep(w)]
            errs = [e for e, _ in pairs]
            med = statistics.median(errs) if errs else float("nan")
            pct = sum(1 for e, w in pairs if e <= 0.25 * w) / max(1, len(pairs))
            ten = sum(1 for e in errs if e <= 10) / max(1, len(errs))
            figures[name] = med
            print(f"    {name:<10} {med:>9.1f} min {pct:>12.0%} {ten:>15.0%} {missing[name]:>12}")
    better = min(figures["history"], figures["slurm"])
    ratio = better / figures["forecast"] if figures["forecast"] else float("inf")
    print(
        f"  jobs that waited: the better baseline's median error is {ratio:.1f}x the "
        "forecast's (goal: >= 2x)"
    )
    return {"ratio": ratio}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short trace, 1,000 queued")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--hours", type=float, default=None, help="trace length (default 24)")
    parser.add_argument("--queued", type=int, default=None, help="cost case (default 10,000)")
    args = parser.parse_args()
    hours = args.hours or (6 if args.quick else 24)
    queued = args.queued or (1000 if args.quick else 10_000)
    accuracy(args.seed, hours)
    cost(queued, repeat=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
