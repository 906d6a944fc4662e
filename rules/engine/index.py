"""What a decision starts from, made from a snapshot: the pools of free GPUs (one per cluster,
model and node group) and the quota and share books with the running jobs charged.

Apart from ``core`` because the forecast keeps both from step to step and hands them to a
``Placement`` itself (``core.Inputs``), instead of having them made again each step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter

from rules.engine.capacity import Pool, pool_of
from rules.engine.fairshare import ShareBook
from rules.engine.quota import QuotaBook
from rules.engine.snapshot import (
    ClusterState,
    EngineConfig,
    Node,
    RunningAllocation,
    Snapshot,
)

NodePools = dict[tuple[str, str, str], tuple[str, str, str]]
"""(cluster, model, node name) -> ``Pool.key``."""


RunningOf = Callable[[str], list[tuple[str, list[RunningAllocation]]]]
"""Model -> each team's running allocations on it (what a reclaim sorts into victims)."""


@dataclass(slots=True)
class Pools:
    """The free GPUs of one decision, by pool: what :func:`index_pools` makes of a snapshot's
    nodes, or what a caller that keeps them from decision to decision (the forecast) hands
    in instead of indexing the nodes again."""

    pools: dict[tuple[str, str, str], Pool]
    """By ``Pool.key``: (cluster, model, node group)."""
    enabled: dict[str, list[Pool]]
    """Model -> its pools in clusters that take new work."""
    unavailable: dict[str, list[Pool]]
    """Model -> its pools in draining, disabled or unreachable clusters."""
    capacity: dict[str, int]
    """Model -> its GPUs in all pools (the share book's capacity)."""
    node_pools: NodePools | None = None
    """Made when first needed (see ``Placement.pool_of_node``); None until then."""


@dataclass(frozen=True, slots=True)
class Books:
    """The quota and share books with the running jobs charged, and the GPUs of preemptions
    under way (they count against a cycle's preemption budget)."""

    quota: QuotaBook
    shares: ShareBook
    preempting: int


def index_pools(snapshot: Snapshot) -> Pools:
    """The pools of ``snapshot``'s nodes, one per (cluster, model, node group), and each
    model's GPUs in them (the share book's capacity)."""
    pools: dict[tuple[str, str, str], Pool] = {}
    enabled: dict[str, list[Pool]] = {}
    unavailable: dict[str, list[Pool]] = {}
    capacity: dict[str, int] = {}
    shared = {m.key: int(m.memory_gib) for m in snapshot.models if m.shared_of}
    for cluster in sorted(snapshot.clusters, key=lambda c: c.id):
        by_model: dict[tuple[str, str], list[Node]] = {}
        # Runs of one (model, group) in one step: a cluster's nodes mostly come grouped.
        for key, run in groupby(cluster.nodes, key=_model_group):
            nodes = by_model.get(key)
            if nodes is None:
                by_model[key] = list(run)
            else:
                nodes.extend(run)
        for model, group in sorted(by_model):
            pool = pool_of(
                cluster.id,
                cluster.state,
                model,
                by_model[(model, group)],
                group,
                shared=model in shared,
                device_size=shared.get(model, 0),
            )
            pools[pool.key] = pool
            capacity[model] = capacity.get(model, 0) + pool.total_gpus
            target = enabled if cluster.state is ClusterState.ENABLED else unavailable
            target.setdefault(model, []).append(pool)
    return Pools(pools, enabled, unavailable, capacity)


def node_pools(pools: dict[tuple[str, str, str], Pool]) -> NodePools:
    """Which pool each node is in, for finding a running job's pool from its nodes."""
    return {
        (pool.cluster, pool.model, name): key for key, pool in pools.items() for name in pool.names
    }


def books_of(snapshot: Snapshot, config: EngineConfig, capacity: dict[str, int]) -> Books:
    """The books of ``snapshot`` with its running jobs charged.

    Charged once per (team, model), not per job: both books only add up, and a cycle sees
    thousands of running jobs for a few hundred pairs."""
    quota = QuotaBook(
        {t.id: t.cohort for t in snapshot.teams}, snapshot.quotas, snapshot.cohort_quotas
    )
    usage: dict[str, float] = {}
    for u in snapshot.usage:
        usage[u.team] = usage.get(u.team, 0.0) + max(0.0, u.weighted_gpu_hours)
    shares = ShareBook(
        capacity,
        {m.key: m.cost_factor for m in snapshot.models},
        {t.id: t.weight for t in snapshot.teams},
        usage,
        config.usage_half_life,
        config.usage_weight,
    )
    charged: dict[tuple[str, str], int] = {}
    preempting = 0
    for a in snapshot.running:
        key = (a.team, a.model)
        gpus = a.replicas * a.gpus_per_replica
        charged[key] = charged.get(key, 0) + gpus
        if a.preempting:
            preempting += gpus
    for (team, model), gpus in charged.items():
        quota.add(team, model, gpus)
        shares.add(team, model, gpus)
    return Books(quota, shares, preempting)


_model_group = attrgetter("model", "group")


def running_in(snapshot: Snapshot) -> RunningOf:
    """Each team's running allocations on a model, from ``snapshot`` (grouped for every model
    at once, when a reclaim first needs one: most decisions reclaim nothing)."""
    running_on: dict[str, list[tuple[str, list[RunningAllocation]]]] = {}
    grouped = False

    def running_of(model: str) -> list[tuple[str, list[RunningAllocation]]]:
        nonlocal grouped
        if not grouped:
            grouped = True
            by_team_model: dict[tuple[str, str], list[RunningAllocation]] = {}
            for a in snapshot.running:
                by_team_model.setdefault((a.team, a.model), []).append(a)
            for (team, on), allocs in by_team_model.items():
                running_on.setdefault(on, []).append((team, allocs))
        return running_on.get(model, [])

    return running_of
