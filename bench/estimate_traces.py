"""The two traces of ``estimate_bench.py``, each a :class:`Scenario` (a trace, the pool it runs on
and the finished runs the portal would have learned from): the synthetic one (recurring job
types of six teams, bursty arrivals, a small two-cluster pool) and the Alibaba GPU trace on a
pool near its peak demand (:func:`alibaba`).

A sibling module of ``bench/estimate_bench.py`` (bench/ is scripts, not a package): the script
puts bench/ and the repository root on ``sys.path`` before importing it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rules.engine import (
    Cluster,
    EngineConfig,
    GpuModel,
    Node,
    PendingJob,
    Policy,
    Quota,
    Requirement,
    Snapshot,
    Team,
)
from rules.engine.forecast import Finished, shape_of

ROOT = Path(__file__).resolve().parent.parent

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
