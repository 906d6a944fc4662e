"""A discrete-time simulation of the pool driven by ``decide()``, for the fairness checks.

Three teams with fair-share weights 1:1:2 compete for 16 GPUs of two models (8 A100 on two
nodes in one cluster, 8 L4 on two nodes in another) over simulated days. Arrivals are Poisson
(seeded): by default 2 jobs an hour per team of 1, 2 or 4 GPUs (some as 2-replica gangs) for
about 2 hours, so each team offers ~9 GPUs of work, more than even carol's 8; the pool is
1.65x overloaded. A team's queue is capped (the portal's "max queued jobs"), so what is
measured is the split of a saturated pool, in cost-weighted GPU-hours: the unit of the usage
ledger and so of fair share (``SimResult.shares``). No team has nominal quota: the GPUs are the
cohort's (``CohortQuota``), so the split comes from the fair-share order alone.

Each cycle (every ``cycle_minutes``): finish jobs whose time is up, accrue decayed,
cost-weighted usage (what the usage ledger does), add arrivals, build a snapshot, call
``decide()``, apply admissions (GPUs on the planned nodes) and preemptions (requeue with the
submit time kept).

With ``shared_pool`` a third cluster holds one A100 node shared by Volcano vGPU / HAMi (2 x 80
GiB = 160 GiB, a capacity kind of its own counted in GiB, priced per GiB-hour at the card's
cost / 80), and 40 % of the arrivals ask for a share of 20, 40 or 80 GiB there instead of
whole GPUs. Shares are charged in the same cost-weighted unit, so the weights must still split
the whole pool.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rules.engine import (
    Cluster,
    CohortQuota,
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
    Usage,
    decide,
)

START = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
A100 = GpuModel(key="a100-80gb", name="A100-80GB", cost_factor=4.0, tflops_fp16=312, memory_gib=80)
L4 = GpuModel(key="l4", name="L4", cost_factor=1.5, tflops_fp16=121, memory_gib=24)
A100_SHARED = GpuModel(
    key="a100-80gb-shared",
    name="A100-80GB shared",
    cost_factor=4.0 / 80,  # per GiB-hour: the card's cost over its memory
    tflops_fp16=312,
    memory_gib=80,
    shared_of=A100.key,
)
SHARED_NODES = {"mid": [("mid-0", A100_SHARED.key, 160)]}
NODES = {  # cluster -> [(node, model, gpus)]
    "east": [("east-0", A100.key, 4), ("east-1", A100.key, 4)],
    "west": [("west-0", L4.key, 4), ("west-1", L4.key, 4)],
}
WEIGHTS = {"alice": 1.0, "bob": 1.0, "carol": 2.0}


@dataclass
class _Job:
    id: str
    team: str
    submitted: datetime
    gpus: int
    replicas: int
    models: tuple[str, ...]
    duration: timedelta
    shared: bool = False


@dataclass
class _Run:
    job: _Job
    cluster: str
    model: str
    nodes: tuple[str, ...]
    started: datetime
    ends: datetime


@dataclass
class SimResult:
    """GPU-hours and waits per team, measured after the warm-up."""

    gpu_hours: dict[str, float]
    """Plain GPU-hours (an A100-hour and an L4-hour count the same)."""
    waits_hours: dict[str, list[float]]
    admitted: dict[str, int]
    dropped: dict[str, int] = field(default_factory=dict)
    oldest_queued_hours: dict[str, float] = field(default_factory=dict)
    """Per team, how long its oldest job still queued at the end had waited."""
    cycles: int = 0
    weighted_gpu_hours: dict[str, float] = field(default_factory=dict)
    """GPU-hours times the model's cost factor: the unit of the usage ledger, which is what
    fair share divides between the teams."""
    weighted_by_model: dict[str, float] = field(default_factory=dict)
    """The same, per model (to see that every pool was used)."""

    def shares(self) -> dict[str, float]:
        """Each team's share of the cost-weighted GPU-hours delivered: what the weights split.

        Fair share charges a team its usage in cost-weighted GPU-hours (``Usage``), so an
        A100-hour (cost 4) weighs as much as 2.7 L4-hours (cost 1.5). Counting plain GPU-hours
        instead credits a team for the cheap GPUs it ran on and debits the team that took the
        expensive ones: the lowest-share team is served first, takes the A100 when its list
        allows, and so looked short of its weight in GPU-hours while its cost-weighted share
        was on target (see docs/scheduling.md, "fairness")."""
        total = sum(self.weighted_gpu_hours.values())
        return {t: h / total for t, h in self.weighted_gpu_hours.items()}

    def gpu_hour_shares(self) -> dict[str, float]:
        """Each team's share of the plain GPU-hours delivered (for information)."""
        total = sum(self.gpu_hours.values())
        return {t: h / total for t, h in self.gpu_hours.items()}

    def max_wait(self) -> dict[str, float]:
        """The longest wait per team: of the admitted jobs and of those still queued."""
        return {
            t: max(max(w, default=0.0), self.oldest_queued_hours.get(t, 0.0))
            for t, w in self.waits_hours.items()
        }


def simulate(
    *,
    days: float = 14.0,
    seed: int = 1,
    cycle_minutes: int = 10,
    warmup_days: float = 1.0,
    arrivals_per_hour: float = 2.0,
    max_queued: int = 20,
    gang_chance: float = 0.2,
    config: EngineConfig | None = None,
    shared_pool: bool = False,
) -> SimResult:
    """Run the simulation and return what each team got."""
    nodes_by_cluster = {**NODES, **(SHARED_NODES if shared_pool else {})}
    catalog = (A100, L4, A100_SHARED) if shared_pool else (A100, L4)
    rnd = random.Random(seed)
    config = config or EngineConfig()
    step = timedelta(minutes=cycle_minutes)
    half_life_h = config.usage_half_life.total_seconds() / 3600
    decay = math.pow(0.5, (cycle_minutes / 60) / half_life_h)
    teams = tuple(Team(id=t, weight=w) for t, w in WEIGHTS.items())
    quotas = tuple(Quota(team=t, model=m.key, nominal=0) for t in WEIGHTS for m in catalog)
    cohort = (
        CohortQuota(cohort="default", model=A100.key, nominal=8),
        CohortQuota(cohort="default", model=L4.key, nominal=8),
        CohortQuota(cohort="default", model=A100_SHARED.key, nominal=160),
    )
    cost = {m.key: m.cost_factor for m in catalog}
    free = {(c, n): g for c, nodes in nodes_by_cluster.items() for n, _, g in nodes}
    queued: dict[str, _Job] = {}
    running: dict[str, _Run] = {}
    usage = {(t, m): 0.0 for t in WEIGHTS for m in cost}
    result = SimResult(
        gpu_hours=dict.fromkeys(WEIGHTS, 0.0),
        weighted_gpu_hours=dict.fromkeys(WEIGHTS, 0.0),
        waits_hours={t: [] for t in WEIGHTS},
        admitted=dict.fromkeys(WEIGHTS, 0),
        dropped=dict.fromkeys(WEIGHTS, 0),
    )
    now = START
    end = START + timedelta(days=days)
    warm = START + timedelta(days=warmup_days)
    serial = 0
    while now < end:
        result.cycles += 1
        # 1. Jobs whose time is up finish and give back their GPUs.
        for job_id, run in list(running.items()):
            if run.ends <= now:
                for n in run.nodes:
                    free[(run.cluster, n)] += run.job.gpus
                del running[job_id]
        # 2. The usage ledger: decay, then charge this step's GPU-hours (cost-weighted).
        for key in usage:
            usage[key] *= decay
        for run in running.values():
            hours = run.job.gpus * run.job.replicas * cycle_minutes / 60
            usage[(run.job.team, run.model)] += hours * cost[run.model]
            if now >= warm:  # a share's GiB-hours are that fraction of a card's hours
                plain = hours / A100_SHARED.memory_gib if run.job.shared else hours
                result.gpu_hours[run.job.team] += plain
                result.weighted_gpu_hours[run.job.team] += hours * cost[run.model]
                by_model = result.weighted_by_model
                by_model[run.model] = by_model.get(run.model, 0.0) + hours * cost[run.model]
        # 3. Arrivals (Poisson per team), refused when the team's queue is full.
        for team in WEIGHTS:
            for _ in range(_poisson(rnd, arrivals_per_hour * cycle_minutes / 60)):
                if sum(1 for j in queued.values() if j.team == team) >= max_queued:
                    result.dropped[team] += 1
                    continue
                serial += 1
                if shared_pool and rnd.random() < 0.4:
                    queued[f"j{serial:06}"] = _Job(
                        f"j{serial:06}",
                        team,
                        now - timedelta(seconds=rnd.randint(0, cycle_minutes * 60 - 1)),
                        rnd.choice([20, 40, 80]),  # GiB of one device
                        1,
                        (A100_SHARED.key,),
                        timedelta(hours=min(8.0, rnd.expovariate(1 / 2.0)) + 0.1),
                        shared=True,
                    )
                    continue
                gpus = rnd.choices([1, 2, 4], weights=[0.5, 0.3, 0.2])[0]
                # Gangs of 2 replicas span two nodes without needing a whole model drained.
                replicas = 2 if gpus <= 2 and rnd.random() < gang_chance else 1
                models = rnd.choice(
                    [(A100.key,), (L4.key,), (A100.key, L4.key), (L4.key, A100.key)]
                )
                hours = min(8.0, rnd.expovariate(1 / 2.0)) + 0.1
                queued[f"j{serial:06}"] = _Job(
                    f"j{serial:06}",
                    team,
                    now - timedelta(seconds=rnd.randint(0, cycle_minutes * 60 - 1)),
                    gpus,
                    replicas,
                    models,
                    timedelta(hours=hours),
                )
        # 4. Decide.
        snapshot = Snapshot(
            now=now,
            models=catalog,
            teams=teams,
            quotas=quotas,
            cohort_quotas=cohort,
            clusters=tuple(
                Cluster(
                    id=c,
                    nodes=tuple(
                        Node(name=n, model=m, total_gpus=g, free_gpus=free[(c, n)])
                        for n, m, g in nodes
                    ),
                )
                for c, nodes in nodes_by_cluster.items()
            ),
            running=tuple(
                RunningAllocation(
                    job_id=r.job.id,
                    team=r.job.team,
                    cluster=r.cluster,
                    model=r.model,
                    replicas=r.job.replicas,
                    gpus_per_replica=r.job.gpus,
                    started_at=r.started,
                    nodes=r.nodes,
                )
                for r in running.values()
            ),
            usage=tuple(
                Usage(team=t, model=m, weighted_gpu_hours=u) for (t, m), u in usage.items()
            ),
            pending=tuple(
                PendingJob(
                    id=j.id,
                    team=j.team,
                    submitted_at=j.submitted,
                    gpus_per_replica=j.gpus,
                    replicas=j.replicas,
                    requirement=Requirement(models=j.models, shared=j.shared),
                    policy=Policy.ORDERED,
                )
                for j in queued.values()
            ),
        )
        decision = decide(snapshot, config)
        # 5. Apply: preemptions requeue (same submit time); admissions take their nodes.
        for p in decision.preemptions:
            run = running.pop(p.job_id)
            for n in run.nodes:
                free[(run.cluster, n)] += run.job.gpus
            queued[run.job.id] = run.job
        for a in decision.admissions:
            job = queued.pop(a.job_id)
            for n in a.node_plan:
                free[(a.cluster, n)] -= a.gpus_per_replica
                assert free[(a.cluster, n)] >= 0, "the engine over-committed a node"
            running[job.id] = _Run(job, a.cluster, a.model, a.node_plan, now, now + job.duration)
            if now >= warm:
                result.admitted[job.team] += 1
                result.waits_hours[job.team].append((now - job.submitted).total_seconds() / 3600)
        now += step
    for team in WEIGHTS:
        waits = [
            (now - j.submitted).total_seconds() / 3600 for j in queued.values() if j.team == team
        ]
        result.oldest_queued_hours[team] = max(waits, default=0.0)
    return result


def _poisson(rnd: random.Random, lam: float) -> int:
    """Knuth's method; fine for the small rates used here."""
    threshold = math.exp(-lam)
    k, p = 0, rnd.random()
    while p > threshold:
        k += 1
        p *= rnd.random()
    return k
