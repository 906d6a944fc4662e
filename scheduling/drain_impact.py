"""What draining or disabling a cluster would touch, said before the admin confirms.

It lives with the scheduler, not the inventory: the queued jobs it counts are read with the
engine's own candidate rule, and the inventory (``clusters.selectors``) stays below scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

from portal.models import HOLDING_STATES, Job, JobState
from rules import engine
from scheduling.inventory import Cluster, ClusterState, Node
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.snapshot import engine_catalog


@dataclass(frozen=True)
class DrainImpact:
    """What draining (or disabling) a cluster touches: jobs holding GPUs on it, which keep
    running, and queued jobs that no other enabled cluster could take (they then wait with
    CLUSTER_DRAINING until it is enabled again or other hardware arrives)."""

    running: int
    queued: int
    models_only_here: list[str]


def cluster_drain_impact(cluster: Cluster) -> DrainImpact:
    """Counted with the engine's own candidate rule, once per distinct requirement."""
    running = Job.objects.filter(cluster=cluster, state__in=HOLDING_STATES).count()
    with_gpus = Node.objects.filter(gpu_model__isnull=False)
    here = set(with_gpus.filter(cluster=cluster).values_list("gpu_model__key", flat=True))
    elsewhere = set(
        with_gpus.filter(cluster__state=ClusterState.ENABLED)
        .exclude(cluster=cluster)
        .values_list("gpu_model__key", flat=True)
    )
    only_here = here - elsewhere
    if not only_here:
        return DrainImpact(running, 0, [])
    catalog, _ = engine_catalog()
    pool = here | elsewhere
    affected = 0
    memo: dict[tuple[object, ...], bool] = {}
    for row in Job.objects.filter(state=JobState.QUEUED).values(*REQUIREMENT_FIELDS):
        key = tuple(tuple(v or ()) if name == "gpu_models" else v for name, v in row.items())
        if key not in memo:
            matched = engine.resolve_candidates(*requirement_of(row), catalog)
            in_pool = {m.key for m in matched.matched} & pool
            memo[key] = bool(in_pool) and in_pool <= only_here
        affected += memo[key]
    return DrainImpact(running, affected, sorted(only_here))
