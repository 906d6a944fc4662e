"""What the live state (:class:`dashboards.live.LiveState`) hands out: the reference data
(clusters, GPU models, teams), a node's state, a pool cell (one model on one cluster) and its
figures, a team's cell of one model, its fair-share standing, and a model's summary across
clusters. Plain values: none of them reads the database.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    id: int
    name: str
    state: str
    prometheus_url: str
    unreachable_since: dt.datetime | None = None
    unreachable_error: str = ""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: int
    key: str
    display_name: str
    cost_factor: float
    active: bool
    shared: bool = False
    """A shared (fractional) GPU pool: its figures are GiB of GPU memory, not GPUs."""
    memory_gib: int = 0


@dataclass(frozen=True, slots=True)
class TeamInfo:
    id: int
    slug: str
    name: str
    weight: float


@dataclass(frozen=True, slots=True)
class NodeState:
    """One (node, GPU model) row of the inventory with the portal's own jobs laid over it, and
    what the one capacity rule (``rules.capacity``) makes of it within its pool."""

    cluster_id: int
    name: str
    gpu_model_id: int
    capacity: int
    allocatable: int
    used_by_others: int
    allocated: int
    """GPUs the portal's holding jobs of this model planned on this node (their ``node_plan``)."""
    ready: bool
    schedulable: bool
    free: int
    """GPUs a new replica could get here now."""
    idle: int
    """GPUs nobody holds, whether or not the node can take work."""

    @property
    def usable(self) -> bool:
        return self.ready and self.schedulable

    @property
    def used(self) -> int:
        return self.allocatable - self.idle

    @property
    def fragmented(self) -> int:
        """Free GPUs on a node that is partly in use: not available as a whole node."""
        return self.free if 0 < self.free < self.allocatable else 0


@dataclass(slots=True)
class PoolCell:
    """The GPUs of one model on one cluster (see ``dashboards.models.PoolMinute``)."""

    cluster_id: int
    gpu_model_id: int
    gpus_total: int = 0
    gpus_allocatable: int = 0
    gpus_allocated: int = 0
    gpus_used_by_others: int = 0
    gpus_free: int = 0
    gpus_unavailable: int = 0
    gpus_fragmented: int = 0
    largest_free_block: int = 0
    nodes_total: int = 0
    nodes_not_ready: int = 0
    nodes_cordoned: int = 0

    def add_node(self, node: NodeState) -> None:
        self.gpus_total += node.capacity
        self.gpus_allocatable += node.allocatable
        self.gpus_used_by_others += node.used_by_others
        self.gpus_free += node.free
        self.gpus_unavailable += 0 if node.usable else node.idle
        self.gpus_fragmented += node.fragmented
        self.largest_free_block = max(self.largest_free_block, node.free)
        self.nodes_total += 1
        self.nodes_not_ready += 0 if node.ready else 1
        self.nodes_cordoned += 0 if node.schedulable else 1

    def figures(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in POOL_FIGURES}


POOL_FIGURES = (
    "gpus_total",
    "gpus_allocatable",
    "gpus_allocated",
    "gpus_used_by_others",
    "gpus_free",
    "gpus_unavailable",
    "gpus_fragmented",
    "largest_free_block",
    "nodes_total",
    "nodes_not_ready",
    "nodes_cordoned",
)


@dataclass(slots=True)
class TeamModelCell:
    """One team's GPUs of one model (see ``dashboards.models.TeamModelMinute``)."""

    team_id: int
    gpu_model_id: int
    gpus_allocated: int = 0
    gpus_running: int = 0
    nominal: int = 0
    pending_gpus: int = 0
    queued_jobs: int = 0

    @property
    def borrowed(self) -> int:
        return max(0, self.gpus_allocated - self.nominal)

    def is_empty(self) -> bool:
        return not (self.gpus_allocated or self.nominal or self.pending_gpus or self.queued_jobs)


@dataclass(slots=True)
class TeamStanding:
    """A team's totals and fair-share standing (see ``dashboards.models.TeamMinute``)."""

    team_id: int
    weight: float
    gpus_allocated: int = 0
    gpus_running: int = 0
    pending_gpus: int = 0
    queued_jobs: int = 0
    nominal: int = 0
    borrowed: int = 0
    allocation_share: float = 0.0
    dominant_model: str = ""
    usage_share: float = 0.0
    share: float = 0.0
    target_share: float | None = None
    gpu_hours: float = 0.0
    """Raw GPU-hours in the ledger over the fair-share horizon."""
    weighted_gpu_hours_decayed: float = 0.0
    """Cost-weighted GPU-hours, decayed with the half-life: what fair share counts."""

    @property
    def active(self) -> bool:
        return bool(self.gpus_allocated or self.queued_jobs)

    @property
    def dominant_share(self) -> float:
        """What the scheduler weighs before dividing by the weight (allocation + usage)."""
        return self.share * self.weight

    def is_empty(self) -> bool:
        return not (self.active or self.nominal or self.usage_share or self.gpu_hours)


@dataclass(slots=True)
class ModelSummary:
    """One GPU model over all clusters: the pool overview's card."""

    model: ModelInfo
    cells: list[PoolCell] = field(default_factory=list)
    pending_gpus: int = 0
    queued_jobs: int = 0
    compute_percent: int = 0
    """A shared pool: Σ over holding replicas of their compute cap (% of one device)."""

    @property
    def unit(self) -> str:
        """What the card's figures count: GiB of GPU memory for a shared pool, else GPUs."""
        return "GiB" if self.model.shared else "GPU"

    @property
    def devices(self) -> int:
        """A shared pool's devices (allocatable GiB / the device's memory)."""
        if not self.model.shared or not self.model.memory_gib:
            return 0
        return self.gpus_allocatable // self.model.memory_gib

    @property
    def compute_used_percent(self) -> float:
        """The shared pool's compute reserved by capped shares, % of all its devices."""
        devices = self.devices
        return min(100.0, self.compute_percent / devices) if devices else 0.0

    def total(self, name: str) -> int:
        return sum(getattr(c, name) for c in self.cells)

    @property
    def gpus_allocatable(self) -> int:
        return self.total("gpus_allocatable")

    @property
    def gpus_allocated(self) -> int:
        return self.total("gpus_allocated")

    @property
    def gpus_used_by_others(self) -> int:
        return self.total("gpus_used_by_others")

    @property
    def gpus_free(self) -> int:
        return self.total("gpus_free")

    @property
    def gpus_unavailable(self) -> int:
        return self.total("gpus_unavailable")

    @property
    def largest_free_block(self) -> int:
        return max((c.largest_free_block for c in self.cells), default=0)

    @property
    def allocated_percent(self) -> float:
        total = self.gpus_allocatable
        return 100.0 * self.gpus_allocated / total if total else 0.0

    def percent(self, name: str) -> float:
        total = self.gpus_allocatable
        return min(100.0, 100.0 * self.total(name) / total) if total else 0.0

    @property
    def meter(self) -> list[tuple[str, str, str]]:
        """The card's meter as (CSS class, x, width) in units of a 100-wide SVG bar: allocated,
        used by other pods, unavailable, one after the other (the rest is free)."""
        out, x = [], 0.0
        for name, css in (
            ("gpus_allocated", "seg-alloc"),
            ("gpus_used_by_others", "seg-other"),
            ("gpus_unavailable", "seg-unavail"),
        ):
            width = min(100.0 - x, self.percent(name))
            out.append((css, f"{x:.2f}", f"{max(0.0, width):.2f}"))
            x += max(0.0, width)
        return out


NO_MODEL = 0
"""Model id under which queued jobs count when no catalog model meets their requirement."""
