"""Fluent builders for engine snapshots, so tables read like the scenario they describe.

    a_snapshot().with_clusters(a_cluster("east").with_nodes("a100-80gb", 4, gpus=8))
                .with_quota("alice", "a100-80gb", nominal=8)
                .with_pending(a_job("j1", team="alice", gpus=2).on_models("t4", "a100-80gb"))

Node free GPUs are derived from the running allocations placed on them (the way the cycle is
told to compute them), unless a node is given explicit foreign usage.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from rules.engine import (
    Admission,
    Backlog,
    Cluster,
    ClusterState,
    CohortQuota,
    Decision,
    EngineConfig,
    GpuModel,
    Node,
    PendingJob,
    PendingReason,
    Policy,
    Quota,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
    Usage,
)

NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)

T4 = GpuModel(key="t4", name="T4", cost_factor=1.0, tflops_fp16=65, memory_gib=16)
L4 = GpuModel(
    key="l4", name="L4", cost_factor=1.5, tflops_fp16=121, memory_gib=24, bf16=True, fp8=True
)
V100 = GpuModel(key="v100-32gb", name="V100-32GB", cost_factor=2.0, tflops_fp16=125, memory_gib=32)
A100 = GpuModel(
    key="a100-80gb", name="A100-80GB", cost_factor=4.0, tflops_fp16=312, memory_gib=80, bf16=True
)
H100 = GpuModel(
    key="h100-80gb",
    name="H100-80GB",
    cost_factor=8.0,
    tflops_fp16=989,
    memory_gib=80,
    bf16=True,
    fp8=True,
)
CATALOG = (T4, L4, V100, A100, H100)


class JobBuilder:
    def __init__(self, job_id: str, team: str, gpus: int, replicas: int) -> None:
        self.job = PendingJob(
            id=job_id,
            team=team,
            submitted_at=NOW - timedelta(minutes=10),
            gpus_per_replica=gpus,
            replicas=replicas,
        )

    def on_models(self, *models: str) -> JobBuilder:
        req = replace(self.job.requirement, models=tuple(models))
        self.job = replace(self.job, requirement=req, policy=Policy.ORDERED)
        return self

    def needs(
        self,
        *,
        memory_gib: float = 0,
        tflops: float = 0,
        bf16: bool = False,
        fp8: bool = False,
    ) -> JobBuilder:
        req = replace(
            self.job.requirement,
            min_memory_gib=memory_gib,
            min_tflops_fp16=tflops,
            bf16=bf16,
            fp8=fp8,
        )
        self.job = replace(self.job, requirement=req)
        return self

    def policy(self, policy: Policy) -> JobBuilder:
        self.job = replace(self.job, policy=policy)
        return self

    def no_fallback(self) -> JobBuilder:
        self.job = replace(self.job, fallback=False)
        return self

    def priority(self, priority: int) -> JobBuilder:
        self.job = replace(self.job, priority=priority)
        return self

    def submitted(self, minutes_ago: float) -> JobBuilder:
        self.job = replace(self.job, submitted_at=NOW - timedelta(minutes=minutes_ago))
        return self

    def build(self) -> PendingJob:
        return self.job


def a_job(job_id: str, *, team: str = "alice", gpus: int = 1, replicas: int = 1) -> JobBuilder:
    return JobBuilder(job_id, team, gpus, replicas)


class ClusterBuilder:
    def __init__(self, cluster_id: str) -> None:
        self.id = cluster_id
        self.state = ClusterState.ENABLED
        self.nodes: list[tuple[str, str, int, int]] = []  # name, model, total, foreign use

    def with_nodes(
        self, model: str, count: int, *, gpus: int = 8, used_by_others: int = 0
    ) -> ClusterBuilder:
        start = sum(1 for n in self.nodes if n[1] == model)
        for i in range(start, start + count):
            self.nodes.append((f"{self.id}-{model}-{i}", model, gpus, used_by_others))
        return self

    def draining(self) -> ClusterBuilder:
        self.state = ClusterState.DRAINING
        return self

    def disabled(self) -> ClusterBuilder:
        self.state = ClusterState.DISABLED
        return self

    def unreachable(self) -> ClusterBuilder:
        self.state = ClusterState.UNREACHABLE
        return self


def a_cluster(cluster_id: str = "east") -> ClusterBuilder:
    return ClusterBuilder(cluster_id)


def running(
    job_id: str,
    *,
    team: str,
    cluster: str,
    model: str,
    nodes: list[str],
    gpus: int,
    priority: int = 0,
    started_minutes_ago: float = 60,
    preempting: bool = False,
) -> RunningAllocation:
    """A running gang: one replica of ``gpus`` on each of ``nodes``."""
    return RunningAllocation(
        job_id=job_id,
        team=team,
        cluster=cluster,
        model=model,
        replicas=len(nodes),
        gpus_per_replica=gpus,
        priority=priority,
        started_at=NOW - timedelta(minutes=started_minutes_ago),
        nodes=tuple(nodes),
        preempting=preempting,
    )


class SnapshotBuilder:
    def __init__(self) -> None:
        self.models: tuple[GpuModel, ...] = CATALOG
        self.teams: dict[str, Team] = {}
        self.quotas: list[Quota] = []
        self.cohort_quotas: list[CohortQuota] = []
        self.clusters: list[ClusterBuilder] = []
        self.running: list[RunningAllocation] = []
        self.pending: list[PendingJob] = []
        self.usage: list[Usage] = []
        self.backlog: list[Backlog] = []
        self.now = NOW

    def with_models(self, *models: GpuModel) -> SnapshotBuilder:
        self.models = models
        return self

    def with_team(
        self, team: str, *, weight: float = 1.0, cohort: str = "default", held: bool = False
    ) -> SnapshotBuilder:
        self.teams[team] = Team(id=team, weight=weight, cohort=cohort, held=held)
        return self

    def with_quota(
        self,
        team: str,
        model: str,
        nominal: int,
        *,
        borrowing: int | None = None,
        lending: int | None = None,
    ) -> SnapshotBuilder:
        self.teams.setdefault(team, Team(id=team))
        self.quotas.append(
            Quota(
                team=team,
                model=model,
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
            )
        )
        return self

    def with_cohort_quota(self, cohort: str, model: str, nominal: int) -> SnapshotBuilder:
        self.cohort_quotas.append(CohortQuota(cohort=cohort, model=model, nominal=nominal))
        return self

    def with_clusters(self, *clusters: ClusterBuilder) -> SnapshotBuilder:
        self.clusters.extend(clusters)
        return self

    def with_running(self, *allocs: RunningAllocation) -> SnapshotBuilder:
        for a in allocs:
            self.teams.setdefault(a.team, Team(id=a.team))
        self.running.extend(allocs)
        return self

    def with_pending(self, *jobs: JobBuilder | PendingJob) -> SnapshotBuilder:
        for j in jobs:
            job = j.build() if isinstance(j, JobBuilder) else j
            self.teams.setdefault(job.team, Team(id=job.team))
            self.pending.append(job)
        return self

    def with_usage(self, team: str, model: str, weighted_gpu_hours: float) -> SnapshotBuilder:
        self.usage.append(Usage(team=team, model=model, weighted_gpu_hours=weighted_gpu_hours))
        return self

    def with_backlog(self, team: str, count: int) -> SnapshotBuilder:
        self.backlog.append(Backlog(team=team, count=count))
        return self

    def build(self) -> Snapshot:
        used: dict[tuple[str, str], int] = {}
        for a in self.running:
            for n in a.nodes:
                used[(a.cluster, n)] = used.get((a.cluster, n), 0) + a.gpus_per_replica
        clusters = tuple(
            Cluster(
                id=c.id,
                state=c.state,
                nodes=tuple(
                    Node(
                        name=name,
                        model=model,
                        total_gpus=total,
                        free_gpus=max(0, total - foreign - used.get((c.id, name), 0)),
                    )
                    for name, model, total, foreign in c.nodes
                ),
            )
            for c in self.clusters
        )
        return Snapshot(
            now=self.now,
            models=self.models,
            teams=tuple(self.teams.values()),
            quotas=tuple(self.quotas),
            clusters=clusters,
            running=tuple(self.running),
            usage=tuple(self.usage),
            pending=tuple(self.pending),
            cohort_quotas=tuple(self.cohort_quotas),
            backlog=tuple(self.backlog),
        )


def a_snapshot() -> SnapshotBuilder:
    return SnapshotBuilder()


def fast_guard(minutes: float = 60) -> EngineConfig:
    return EngineConfig(starvation_wait=timedelta(minutes=minutes))


__all__ = [
    "A100",
    "CATALOG",
    "H100",
    "L4",
    "NOW",
    "T4",
    "V100",
    "ClusterBuilder",
    "Requirement",
    "SnapshotBuilder",
    "a_cluster",
    "a_job",
    "a_snapshot",
    "admitted",
    "fast_guard",
    "preempted",
    "reasons_by_job",
    "running",
]


def admitted(decision: Decision) -> dict[str, Admission]:
    """Admissions by job id."""
    return {a.job_id: a for a in decision.admissions}


def reasons_by_job(decision: Decision) -> dict[str, PendingReason]:
    return {p.job_id: p for p in decision.pending}


def preempted(decision: Decision) -> set[str]:
    return {p.job_id for p in decision.preemptions}
