"""The pool as it is now, read from the node inventory and the job table.

``LiveState`` loads each part the first time it is asked for, in a fixed number of queries
whatever the number of nodes, jobs or teams (the pages and the query-count tests rely on it):
the snapshot task takes all of it, the overview page only the pool and the queue, the
fair-share page the shares. Every figure here is an aggregate; job-level data never leaves
this module. The values it hands out (a node's state, a pool cell, a team's standing, a model's
summary, the reference data) are :mod:`dashboards.live_types`.

The fair-share figures are the scheduling engine's own: the same ``ShareBook`` over the same
capacity (active models' allocatable GPUs in every cluster), decayed usage and weights the
cycle feeds it (``scheduling/snapshot.py``), so the dashboard and the scheduler cannot disagree.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from functools import cached_property
from itertools import groupby
from typing import Any

from django.db import connection
from django.db.models import Count, F, Sum
from django.utils import timezone

from clusters.models import Cluster, Node
from dashboards.live_types import (
    NO_MODEL,
    POOL_FIGURES,
    ClusterInfo,
    ModelInfo,
    ModelSummary,
    NodeState,
    PoolCell,
    TeamInfo,
    TeamModelCell,
    TeamStanding,
)
from portal import db
from portal.models import HOLDING_STATES, Job, JobState, Team
from rules import engine
from rules.capacity import NodeLoad, planned_gpus_by_node, pool_free
from rules.engine.fairshare import ShareBook
from scheduling.matching import REQUIREMENT_FIELDS, requirement_of
from scheduling.models import GpuModel, Quota, TeamPolicy, UsageRecord
from scheduling.snapshot import decayed_usage, engine_catalog, engine_config


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
