"""The starvation guard: capacity and cohort quota held for a head-of-line job that has waited
past ``EngineConfig.starvation_wait``, so that later jobs do not take what it lacks.

:func:`plan_hold` only reads the decision's state and returns a :class:`HoldPlan`;
``core.Placement`` applies it, so that every change to the state is made in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rules.engine import reasons
from rules.engine.capacity import Pool
from rules.engine.decision import CapacityHold
from rules.engine.snapshot import GpuModel, PendingJob
from rules.engine.state import EngineState


@dataclass(frozen=True, slots=True)
class HoldPlan:
    """What to hold for a starving job, and the words of its wait."""

    job: PendingJob
    model: GpuModel
    pool: Pool | None
    """The pool whose free GPUs are held (None: cohort quota only)."""
    picks: tuple[tuple[int, int], ...]
    """(node index in ``pool``, GPUs to hold there) on the nodes the job would use."""
    hold: CapacityHold
    detail: str
    """The detail of its HOLDING_CAPACITY wait."""


def plan_hold(
    pl: EngineState, job: PendingJob, model: GpuModel, *, quota_short: bool
) -> HoldPlan | None:
    """What to hold of what a starving job lacks on ``model`` (the starvation guard); None
    when nothing may be held.

    Capacity: on the enabled cluster where the most of its GPUs are already free, the free
    GPUs of the nodes it would use (most free first) are held, so that no later job takes
    them and the job fits once the jobs still running there end. Quota: when the cohort
    cannot lend enough (``quota_short``), what it can lend now is held for the job, so that
    later borrowers do not take it; jobs within their own nominal quota are not affected.
    """
    if len(pl.holds) >= pl.config.max_capacity_holds or model.key in pl.memos.held_models:
        return None
    g, r = job.gpus_per_replica, job.replicas
    pools = pl.enabled.get(model.key, ())
    if not any(p.could_ever_fit(g, r) for p in pools):
        return None
    chosen: tuple[Pool, list[tuple[int, int]]] | None = None
    if not any(p.free_total >= job.gpus and p.fits(g, r) for p in pools):
        chosen = _most_free(pools, g, r)
    elif not quota_short:  # pragma: no cover - it would have been admitted
        return None
    cohort_gpus = max(0, pl.quota.can_lend(job.team, model.key)) if quota_short else 0
    pool, picks = chosen if chosen is not None else (None, [])
    hold = CapacityHold(
        job_id=job.id,
        team=job.team,
        cluster=pool.cluster if pool is not None else "",
        model=model.key,
        nodes=tuple((pool.names[i], h) for i, h in picks) if pool is not None else (),
        cohort_gpus=cohort_gpus,
    )
    detail = reasons.detail_holding(
        hold.gpus,
        job.gpus,
        len(hold.nodes),
        hold.cluster,
        cohort_gpus,
        pl.snap.now - job.submitted_at,
        pl.config.starvation_wait,
        "GiB" if job.requirement.shared else "GPUs",
    )
    return HoldPlan(job, model, pool, tuple(picks), hold, detail)


def _most_free(pools: Sequence[Pool], g: int, r: int) -> tuple[Pool, list[tuple[int, int]]] | None:
    """The pool where the most of the gang's GPUs are free now, with what is free on the
    nodes it would use there (most free first): holding those lets it start soonest."""
    best: tuple[tuple[int, str], Pool, list[tuple[int, int]]] | None = None
    for pool in pools:
        if not pool.could_ever_fit(g, r):
            continue
        order = sorted(
            (i for i in range(len(pool.names)) if pool.total[i] >= g),
            key=lambda i: (-pool.free[i], pool.names[i]),
        )
        remaining = r
        picks: list[tuple[int, int]] = []
        for i in order:
            k = min(pool.total[i] // g, remaining)
            picks.append((i, min(pool.free[i], k * g)))
            remaining -= k
            if remaining == 0:
                break
        rank = (-sum(h for _, h in picks), pool.cluster)
        if best is None or rank < best[0]:
            best = (rank, pool, picks)
    return None if best is None else (best[1], best[2])
