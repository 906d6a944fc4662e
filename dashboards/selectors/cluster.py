"""The cluster view: the heat map of nodes, idle allocations and a job's utilization card."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from dashboards.live import LiveState
from dashboards.live_types import ModelInfo, NodeState, PoolCell
from dashboards.models import (
    JobUtilization,
    MetricsSource,
)
from dashboards.selectors.pool import MetricsStatus, metrics_statuses
from portal.models import Job, JobState


@dataclass(frozen=True)
class HeatNode:
    node: NodeState

    @property
    def level(self) -> int:
        """0 (idle) … 4 (full): the heat-map colour step; the cell also shows the numbers."""
        n = self.node
        if n.allocatable <= 0:
            return 0
        return min(4, math.ceil(4 * n.used / n.allocatable))

    @property
    def description(self) -> str:
        n = self.node
        flags = []
        if not n.ready:
            flags.append("NotReady")
        if not n.schedulable:
            flags.append("cordoned")
        text = (
            f"{n.name}: {n.used} of {n.allocatable} GPUs used "
            f"({n.allocated} by portal jobs, {n.used_by_others} by other pods), {n.free} free"
        )
        return text + (f"; {', '.join(flags)}" if flags else "")


@dataclass
class HeatGroup:
    model: ModelInfo
    cell: PoolCell
    nodes: list[HeatNode]


@dataclass
class ClusterHeat:
    id: int
    name: str
    state: str
    groups: list[HeatGroup]
    unknown_nodes: int
    metrics: MetricsStatus
    unreachable_since: dt.datetime | None = None
    unreachable_error: str = ""


def cluster_heatmap(*, live: LiveState) -> list[ClusterHeat]:
    statuses = metrics_statuses(live=live)
    grouped: dict[tuple[int, int], list[HeatNode]] = defaultdict(list)
    for node in live.nodes:
        grouped[(node.cluster_id, node.gpu_model_id)].append(HeatNode(node))
    out = []
    for c in live.clusters.values():
        groups = [
            HeatGroup(live.models[mid], live.cells[(cid, mid)], nodes)
            for (cid, mid), nodes in grouped.items()
            if cid == c.id
        ]
        groups.sort(key=lambda g: (-g.cell.gpus_allocatable, g.model.key))
        out.append(
            ClusterHeat(
                c.id,
                c.name,
                c.state,
                groups,
                live.unknown_nodes.get(c.id, 0),
                statuses[c.id],
                c.unreachable_since,
                c.unreachable_error,
            )
        )
    return out


def idle_allocations(*, limit: int = 200) -> list[JobUtilization]:
    """Running jobs flagged idle (admin view): the job links go through the job page, which
    checks access again."""
    return list(
        JobUtilization.objects.filter(idle=True, job__state=JobState.RUNNING)
        .select_related("job", "job__team", "job__gpu_model", "cluster")
        .order_by("idle_since")[:limit]
    )


def job_utilization_for(*, job: Job) -> tuple[JobUtilization | None, MetricsStatus | None]:
    """The job page's utilization card: the last reading and whether metrics are usable."""
    if job.cluster_id is None:
        return None, None
    prometheus_url = getattr(job.cluster, "prometheus_url", "") if job.cluster else ""
    if not prometheus_url:
        return None, None
    reading = JobUtilization.objects.filter(job=job).first()
    source = MetricsSource.objects.filter(cluster_id=job.cluster_id).first()
    stale = timezone.now() - dt.timedelta(seconds=3 * settings.GPUPOOL_DCGM_INTERVAL)
    if source is None:
        return reading, MetricsStatus(True, False, None, "not read yet")
    fresh = source.checked_at >= stale
    return reading, MetricsStatus(
        True, source.ok and fresh, source.checked_at, source.message or ("" if fresh else "old")
    )
