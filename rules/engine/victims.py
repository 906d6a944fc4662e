"""Which running jobs a reclaim may take: each model's running jobs sorted, per pool, into
victims (on borrowed quota), in flight (being preempted) and protected (borrowed, within
their team's minimum runtime).

A function of the decision's state that returns the lists; ``core.Placement.reclaimable``
stores them, once per model and decision, when a reclaim first looks at the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from rules.engine.capacity import Pool
from rules.engine.snapshot import ClusterState, RunningAllocation
from rules.engine.state import EngineState, Victim

PoolKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Reclaimable:
    """A model's running jobs a reclaim may count on, per pool (``Pool.key``)."""

    victims: dict[PoolKey, list[Victim]]
    """On borrowed quota: lowest priority, then most recently started first."""
    inflight: dict[PoolKey, list[Victim]]
    """Already being preempted: their GPUs come back anyway, in the same order."""
    protected: dict[PoolKey, list[Victim]]
    """Borrowed but within their team's minimum runtime: not victims yet."""


def sort_reclaimable(pl: EngineState, model: str) -> Reclaimable:
    """Sort the running jobs on ``model`` into victims, in flight and protected, per pool.

    Borrowed: count each team's jobs on the model in start order; a job any of whose GPUs
    lies above nominal is borrowed (the newest are). Only the cycle's start counts (nominal
    quotas and the snapshot's jobs), so computing it late changes nothing; most cycles
    reclaim on few models or none, and this walks every running job of one.
    """
    now = pl.snap.now
    victims: dict[PoolKey, list[Victim]] = {}
    inflight: dict[PoolKey, list[Victim]] = {}
    protected: dict[PoolKey, list[Victim]] = {}
    touched: set[PoolKey] = set()
    for team, allocs in pl.running_of(model):
        nominal = pl.quota.row(team, model).nominal
        allocs.sort(key=_by_start)
        cumulative = 0
        for a in allocs:
            cumulative += a.replicas * a.gpus_per_replica
            home = _home_pool(pl, a, model)
            if home is None or home.state is not ClusterState.ENABLED or not a.nodes:
                continue
            if a.preempting:
                nodes = [home.index[n] for n in a.nodes if n in home.index]
                inflight.setdefault(home.key, []).append(Victim(a, nodes))
                touched.add(home.key)
            elif cumulative > nominal:
                nodes = [home.index[n] for n in a.nodes if n in home.index]
                if a.protected_until is not None and a.protected_until > now:
                    # Within its team's minimum runtime: not a victim yet, but a claimer
                    # it would make room for is told until when.
                    protected.setdefault(home.key, []).append(Victim(a, nodes))
                    continue
                victims.setdefault(home.key, []).append(Victim(a, nodes))
                touched.add(home.key)
    for key in touched:
        for lists in (victims, inflight):
            if key in lists:
                lists[key].sort(key=_by_victim_order)
    return Reclaimable(victims, inflight, protected)


def _home_pool(pl: EngineState, a: RunningAllocation, model: str) -> Pool | None:
    """The pool a running allocation's nodes are in (by its first planned node; every
    replica of a job is in one pool), else the cluster's only pool of the model."""
    for name in a.nodes:
        key = pl.pool_of_node().get((a.cluster, model, name))
        if key is not None:
            return pl.pools[key]
    return pl.pools.get((a.cluster, model, ""))


_by_start = attrgetter("started_at", "job_id")
_by_victim_order = attrgetter("sort_key")
