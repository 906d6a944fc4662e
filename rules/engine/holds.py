"""The starvation guard: capacity and cohort quota held for a head-of-line job that has waited
past ``EngineConfig.starvation_wait``, so that later jobs do not take what it lacks."""

from __future__ import annotations

from rules.engine import reasons
from rules.engine.capacity import Pool
from rules.engine.decision import (
    CapacityHold,
)
from rules.engine.reasons import ReasonCode
from rules.engine.snapshot import GpuModel, PendingJob
from rules.engine.state import EngineState


def try_hold(pl: EngineState, job: PendingJob, model: GpuModel, *, quota_short: bool) -> bool:
    """Hold what a starving job lacks on ``model`` (the starvation guard); True when held.

    Capacity: on the enabled cluster where the most of its GPUs are already free, the free
    GPUs of the nodes it would use (most free first) are held, so that no later job takes
    them and the job fits once the jobs still running there end. Quota: when the cohort
    cannot lend enough (``quota_short``), what it can lend now is held for the job, so that
    later borrowers do not take it; jobs within their own nominal quota are not affected.
    """
    if len(pl.holds) >= pl.config.max_capacity_holds or model.key in pl.memos.held_models:
        return False
    g, r = job.gpus_per_replica, job.replicas
    pools = pl.enabled.get(model.key, ())
    if not any(p.could_ever_fit(g, r) for p in pools):
        return False
    chosen: tuple[Pool, list[tuple[int, int]]] | None = None
    if not any(p.free_total >= job.gpus and p.fits(g, r) for p in pools):
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
        if best is not None:
            chosen = (best[1], best[2])
    elif not quota_short:  # pragma: no cover - it would have been admitted
        return False
    cohort_gpus = max(0, pl.quota.can_lend(job.team, model.key)) if quota_short else 0
    if cohort_gpus:
        pl.quota.hold(job.team, model.key, cohort_gpus)
        pl.memos.quota_held_by.setdefault(
            (pl.quota.row(job.team, model.key).cohort, model.key), job.id
        )
    held_nodes: list[tuple[str, int]] = []
    cluster = ""
    if chosen is not None:
        pool, picks = chosen
        cluster = pool.cluster
        for i, h in picks:
            if h:
                pool.hold(i, h)
            held_nodes.append((pool.names[i], h))
        pl.memos.held_by.setdefault(id(pool), job.id)
    # A failure may now be "held for another job": classify afresh.
    pl.memos.cap_failed = {k: f for k, f in pl.memos.cap_failed.items() if k[0] != model.key}
    pl.memos.failed_sig.clear()
    pl.memos.held_models.add(model.key)
    hold = CapacityHold(
        job_id=job.id,
        team=job.team,
        cluster=cluster,
        model=model.key,
        nodes=tuple(held_nodes),
        cohort_gpus=cohort_gpus,
    )
    pl.holds.append(hold)
    detail = reasons.detail_holding(
        hold.gpus,
        job.gpus,
        len(held_nodes),
        cluster,
        cohort_gpus,
        pl.snap.now - job.submitted_at,
        pl.config.starvation_wait,
        "GiB" if job.requirement.shared else "GPUs",
    )
    pl.wait(job, ReasonCode.HOLDING_CAPACITY, label=model.label, detail=detail)
    return True
