"""The pool as it is now, read from the node inventory and the job table.

``LiveState`` loads each part the first time it is asked for, in a fixed number of queries
whatever the number of nodes, jobs or teams (the pages and the query-count tests rely on it):
the snapshot task takes all of it, the overview page only the pool and the queue, the
fair-share page the shares. Every figure here is an aggregate; job-level data never leaves
this module.

The fair-share figures are the scheduling engine's own: the same ``ShareBook`` over the same
capacity (active models' allocatable GPUs in every cluster), decayed usage and weights the
cycle feeds it (``scheduling/snapshot.py``), so the dashboard and the scheduler cannot disagree.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby
from typing import Any

from django.db import connection
from django.db.models import Count, F, Sum
from django.utils import timezone

from clusters.models import Cluster, Node
from portal import db
from portal.models import HOLDING_STATES, Job, JobState, Team
from rules import engine
from rules.capacity import NodeLoad, planned_gpus_by_node, pool_free
from rules.engine.fairshare import ShareBook
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.models import GpuModel, Quota, TeamPolicy, UsageRecord
from scheduling.snapshot import decayed_usage, engine_catalog, engine_config


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


class LiveState:
    """The pool now; each part is loaded on first use (see the module docstring)."""

    def __init__(self, *, now: dt.datetime | None = None) -> None:
        self.now = now or timezone.now()

    # -- reference data ---------------------------------------------------------------------

    @cached_property
    def clusters(self) -> dict[int, ClusterInfo]:
        # prometheus_url arrives with the clusters issue; read it only where it exists.
        fields = ["id", "name", "state", "unreachable_since", "unreachable_error"]
        has_prometheus = any(f.name == "prometheus_url" for f in Cluster._meta.get_fields())
        if has_prometheus:
            fields.append("prometheus_url")
        return {
            r["id"]: ClusterInfo(
                r["id"],
                r["name"],
                r["state"],
                r.get("prometheus_url") or "",
                r["unreachable_since"],
                r["unreachable_error"],
            )
            for r in Cluster.objects.order_by("name").values(*fields)
        }

    @cached_property
    def models(self) -> dict[int, ModelInfo]:
        return {
            m["id"]: ModelInfo(
                m["id"],
                m["key"],
                m["display_name"],
                m["cost_factor"],
                m["active"],
                m["shares_id"] is not None,
                m["memory_gib"],
            )
            for m in GpuModel.objects.values(
                "id", "key", "display_name", "cost_factor", "active", "shares_id", "memory_gib"
            )
        }

    @cached_property
    def shared_compute(self) -> dict[int, int]:
        """Model id → Σ replicas x compute cap (%) of the holding shares that cap compute."""
        rows = (
            Job.objects.filter(
                state__in=HOLDING_STATES,
                gpu_model__isnull=False,
                gpu_cores_percent__isnull=False,
            )
            .values("gpu_model_id")
            .annotate(percent=Sum(F("replicas") * F("gpu_cores_percent")))
            .order_by()
        )
        return {r["gpu_model_id"]: int(r["percent"] or 0) for r in rows}

    @cached_property
    def teams(self) -> dict[int, TeamInfo]:
        weights = dict(TeamPolicy.objects.values_list("team_id", "weight"))
        return {
            pk: TeamInfo(pk, slug, name, weights.get(pk, 1.0))
            for pk, slug, name in Team.objects.order_by("name").values_list("id", "slug", "name")
        }

    # -- jobs -------------------------------------------------------------------------------

    @cached_property
    def holding(self) -> list[dict[str, Any]]:
        """Jobs that hold GPUs (admitted to cancelling), summed per team, cluster, model and
        state: one row per group however many jobs there are."""
        return list(
            Job.objects.filter(state__in=HOLDING_STATES, gpu_model__isnull=False)
            .values("team_id", "cluster_id", "gpu_model_id", "state")
            .annotate(gpus=Sum(F("replicas") * F("gpus_per_replica")), jobs=Count("id"))
            .order_by()
        )

    @cached_property
    def planned(self) -> dict[tuple[int, str, int], int]:
        """(cluster id, node name, model id) → GPUs the holding jobs' node plans put there.

        Keyed by model too: a MIG node is one row per resource, and a job on its whole GPUs
        takes nothing off its slices. PostgreSQL unnests the plans and sums per node in SQL;
        elsewhere (the demo's SQLite) ``planned_gpus_by_node`` sums them here.
        """
        # States inlined as literals (constants, not input) so the planner can prove the
        # partial index on active jobs applies; the materialized CTE keeps it from planning a
        # parallel scan for the 100 rows it assumes every unnested plan has.
        states = ", ".join(f"'{s}'" for s in HOLDING_STATES)
        if db.on_postgresql():
            with connection.cursor() as cur:
                cur.execute(
                    "WITH h AS MATERIALIZED (SELECT cluster_id, gpu_model_id, node_plan, "  # noqa: S608
                    "gpus_per_replica "
                    f"FROM portal_job WHERE state IN ({states}) AND cluster_id IS NOT NULL) "
                    "SELECT h.cluster_id, n.node, h.gpu_model_id, SUM(h.gpus_per_replica) "
                    "FROM h, jsonb_array_elements_text(CASE WHEN jsonb_typeof(h.node_plan) = "
                    "'array' THEN h.node_plan ELSE '[]' END) AS n(node) WHERE n.node <> '' "
                    "GROUP BY 1, 2, 3"
                )
                return {(c, node, m): int(g) for c, node, m, g in cur.fetchall()}
        return planned_gpus_by_node(  # type: ignore[return-value]
            (cluster_id, plan, gpus, model_id)
            for cluster_id, plan, gpus, model_id in Job.objects.filter(
                state__in=HOLDING_STATES, cluster__isnull=False
            ).values_list("cluster_id", "node_plan", "gpus_per_replica", "gpu_model_id")
        )

    @cached_property
    def queued(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(team id, model id or NO_MODEL) → (queued jobs, GPUs they ask for).

        A job counts under the model it waits for: the closest candidate the last cycle found
        (``JobWait.model``), else the first model the user named, else its first choice
        under its policy (a job no cycle has looked at yet). Not under the cheapest catalog
        entry its requirement matches: a job blocked on A100s is an A100 wait, even when T4s
        would have been tried first.

        Grouped by requirement in SQL, so a deep queue costs one row per distinct requirement
        and blocker; each requirement is resolved once against the catalog.
        """
        catalog, model_pk = engine_catalog()
        rows = (
            Job.objects.filter(state=JobState.QUEUED)
            .values("team_id", "wait__model", *REQUIREMENT_FIELDS)
            .annotate(n=Count("id"), gpus=Sum(F("replicas") * F("gpus_per_replica")))
            .order_by()
        )
        memo: dict[tuple[Any, ...], int] = {}
        out: dict[tuple[int, int], tuple[int, int]] = defaultdict(lambda: (0, 0))
        for r in rows:
            named = tuple(r["gpu_models"] or ())
            model_id = model_pk.get(r["wait__model"]) if r["wait__model"] else None
            if model_id is None and named:
                model_id = model_pk.get(named[0])
            if model_id is None:
                key = (named, *(r[name] for name in REQUIREMENT_FIELDS[1:]))
                if key not in memo:
                    matched = engine.resolve_candidates(*requirement_of(r), catalog).matched
                    memo[key] = model_pk[matched[0].key] if matched else NO_MODEL
                model_id = memo[key]
            slot = (r["team_id"], model_id)
            jobs, gpus = out[slot]
            out[slot] = (jobs + r["n"], gpus + (r["gpus"] or 0))
        return dict(out)

    # -- the pool ---------------------------------------------------------------------------

    @cached_property
    def nodes(self) -> list[NodeState]:
        planned = self.planned
        rows = list(
            Node.objects.filter(gpu_model__isnull=False)
            .order_by("cluster_id", "gpu_model_id", "name")
            .values(
                "cluster_id",
                "name",
                "gpu_model_id",
                "gpu_capacity",
                "gpu_allocatable",
                "gpus_used_by_others",
                "ready",
                "schedulable",
            )
        )
        states: list[NodeState] = []
        for _, group in groupby(rows, key=lambda n: (n["cluster_id"], n["gpu_model_id"])):
            pool = list(group)
            loads = [
                NodeLoad(
                    name=n["name"],
                    allocatable=n["gpu_allocatable"],
                    used_by_others=n["gpus_used_by_others"],
                    planned=planned.get((n["cluster_id"], n["name"], n["gpu_model_id"]), 0),
                    ready=n["ready"],
                    schedulable=n["schedulable"],
                )
                for n in pool
            ]
            frees, _ = pool_free(loads)
            states.extend(
                NodeState(
                    cluster_id=n["cluster_id"],
                    name=n["name"],
                    gpu_model_id=n["gpu_model_id"],
                    capacity=n["gpu_capacity"],
                    allocatable=n["gpu_allocatable"],
                    used_by_others=n["gpus_used_by_others"],
                    allocated=load.planned,
                    ready=n["ready"],
                    schedulable=n["schedulable"],
                    free=free.free,
                    idle=free.idle,
                )
                for n, load, free in zip(pool, loads, frees, strict=True)
            )
        return states

    @cached_property
    def unknown_nodes(self) -> dict[int, int]:
        """Per cluster, node rows whose GPU product the catalog does not know (never used)."""
        return dict(
            Node.objects.filter(gpu_model__isnull=True, gpu_capacity__gt=0)
            .values("cluster_id")
            .annotate(n=Count("id"))
            .values_list("cluster_id", "n")
        )

    @cached_property
    def cells(self) -> dict[tuple[int, int], PoolCell]:
        cells: dict[tuple[int, int], PoolCell] = {}
        for node in self.nodes:
            key = (node.cluster_id, node.gpu_model_id)
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = PoolCell(node.cluster_id, node.gpu_model_id)
            cell.add_node(node)
        for job in self.holding:
            if job["cluster_id"] is None:
                continue
            key = (job["cluster_id"], job["gpu_model_id"])
            cell = cells.get(key)
            if cell is None:  # a job on nodes the inventory no longer lists
                cell = cells[key] = PoolCell(job["cluster_id"], job["gpu_model_id"])
            cell.gpus_allocated += job["gpus"]
        return cells

    def model_summaries(self, *, include_idle_models: bool = False) -> list[ModelSummary]:
        """One card per model that has GPUs or demand, most GPUs first."""
        summaries: dict[int, ModelSummary] = {}
        for cell in self.cells.values():
            model = self.models.get(cell.gpu_model_id)
            if model is not None:
                summaries.setdefault(model.id, ModelSummary(model)).cells.append(cell)
        for (_team, model_id), (jobs, gpus) in self.queued.items():
            model = self.models.get(model_id)
            if model is None:
                continue
            summary = summaries.setdefault(model.id, ModelSummary(model))
            summary.queued_jobs += jobs
            summary.pending_gpus += gpus
        if include_idle_models:
            for model in self.models.values():
                if model.active:
                    summaries.setdefault(model.id, ModelSummary(model))
        compute = self.shared_compute if any(m.shared for m in self.models.values()) else {}
        for s in summaries.values():
            s.cells.sort(key=lambda c: self.clusters[c.cluster_id].name)
            s.compute_percent = compute.get(s.model.id, 0)
        return sorted(summaries.values(), key=lambda s: (-s.gpus_allocatable, s.model.key))

    # -- teams ------------------------------------------------------------------------------

    @cached_property
    def team_cells(self) -> dict[tuple[int, int], TeamModelCell]:
        cells: dict[tuple[int, int], TeamModelCell] = {}

        def cell(team_id: int, model_id: int) -> TeamModelCell:
            found = cells.get((team_id, model_id))
            if found is None:
                found = cells[(team_id, model_id)] = TeamModelCell(team_id, model_id)
            return found

        for job in self.holding:
            c = cell(job["team_id"], job["gpu_model_id"])
            gpus = job["gpus"]
            c.gpus_allocated += gpus
            c.gpus_running += gpus if job["state"] == JobState.RUNNING else 0
        for team_id, model_id, nominal in Quota.objects.filter(nominal__gt=0).values_list(
            "team_id", "gpu_model_id", "nominal"
        ):
            cell(team_id, model_id).nominal = nominal
        for (team_id, model_id), (jobs, gpus) in self.queued.items():
            if model_id != NO_MODEL:
                c = cell(team_id, model_id)
                c.queued_jobs += jobs
                c.pending_gpus += gpus
        return cells

    @cached_property
    def standings(self) -> dict[int, TeamStanding]:
        """Every team's totals and fair-share figures, the engine's formula over live data."""
        config = engine_config()
        half_life = config.usage_half_life
        models = self.models
        teams = self.teams
        capacity: dict[str, int] = defaultdict(int)
        for node in self.nodes:
            model = models[node.gpu_model_id]
            if model.active and node.allocatable > 0:
                capacity[model.key] += node.allocatable
        usage: dict[str, float] = defaultdict(float)
        for (slug, _model), weighted in decayed_usage(now=self.now, half_life=half_life).items():
            usage[slug] += max(0.0, weighted)
        book = ShareBook(
            dict(capacity),
            {m.key: m.cost_factor for m in models.values()},
            {t.slug: t.weight for t in teams.values()},
            dict(usage),
            half_life,
            config.usage_weight,
        )
        standings = {t.id: TeamStanding(team_id=t.id, weight=t.weight) for t in teams.values()}
        for job in self.holding:
            if job["cluster_id"] is None or job["team_id"] not in teams:
                continue
            book.add(teams[job["team_id"]].slug, models[job["gpu_model_id"]].key, job["gpus"])
        for cell in self.team_cells.values():
            s = standings.get(cell.team_id)
            if s is None:
                continue
            s.gpus_allocated += cell.gpus_allocated
            s.gpus_running += cell.gpus_running
            s.nominal += cell.nominal
            s.borrowed += cell.borrowed
        for (team_id, _model), (jobs, gpus) in self.queued.items():
            if team_id in standings:
                standings[team_id].queued_jobs += jobs
                standings[team_id].pending_gpus += gpus
        since = self.now - 8 * half_life  # the horizon decayed_usage counts
        raw = dict(
            UsageRecord.objects.filter(hour__gte=since)
            .values("team_id")
            .annotate(h=Sum("gpu_hours"))
            .values_list("team_id", "h")
        )
        for t in teams.values():
            s = standings[t.id]
            s.allocation_share, s.dominant_model = book.allocation_share(t.slug)
            s.usage_share = book.usage_share(t.slug)
            s.share = book.share(t.slug)
            s.weighted_gpu_hours_decayed = usage.get(t.slug, 0.0)
            s.gpu_hours = raw.get(t.id) or 0.0
        active_weight = sum(s.weight for s in standings.values() if s.active)
        for s in standings.values():
            s.target_share = s.weight / active_weight if s.active and active_weight else None
        return standings

    # -- totals -----------------------------------------------------------------------------

    def totals(self) -> dict[str, int]:
        """The pool's GPUs: shared pools count GiB, so their cards show them and the totals
        leave them out (GiB and GPUs do not add up)."""
        figures = {name: 0 for name in POOL_FIGURES if name != "largest_free_block"}
        for cell in self.cells.values():
            model = self.models.get(cell.gpu_model_id)
            if model is not None and model.shared:
                continue
            for name in figures:
                figures[name] += getattr(cell, name)
        figures["queued_jobs"] = sum(jobs for jobs, _ in self.queued.values())
        shared = {m.id for m in self.models.values() if m.shared}
        figures["pending_gpus"] = sum(
            gpus for (_t, m), (_j, gpus) in self.queued.items() if m not in shared
        )
        figures["unplaceable_jobs"] = sum(
            jobs for (_t, m), (jobs, _g) in self.queued.items() if m == NO_MODEL
        )
        figures["running_jobs"] = sum(
            j["jobs"] for j in self.holding if j["state"] == JobState.RUNNING
        )
        return figures
