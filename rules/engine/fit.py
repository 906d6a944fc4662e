"""Where a gang fits: the pools it fits now, best fit first, and why it fits none (too large
ever, held for another job, or no room now). Functions of the decision's state, which only
they and ``core`` read for capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

from rules.engine.capacity import PLAIN, Pool
from rules.engine.reasons import SkipCode
from rules.engine.snapshot import (
    GpuModel,
    PendingJob,
    Policy,
)
from rules.engine.state import (
    EngineState,
    Failure,
)


def fitting_pools(
    pl: EngineState, pools: Sequence[Pool], g: int, r: int, need: int, ask: tuple[int, ...] = ()
) -> list[tuple[tuple[int, int, str], Pool, list[int]]]:
    """Every enabled cluster the gang fits, best fit first: least leftover on the nodes
    used, then least free left in the cluster, then cluster id. A pool booked per device
    (``Pool.general``) places by its own rule and keeps the devices it planned in
    ``pl.memos.devices_of[id(pool)]``."""
    out: list[tuple[tuple[int, int, str], Pool, list[int]]] = []
    for pool in pools:
        if pool.max_total < g or pool.free_total < need:
            continue
        if pool.general and ask:
            if not pool.fits_ask(ask, r):  # type: ignore[arg-type]
                continue
            placed = pool.plan_ask(ask, r, pl.frag)  # type: ignore[arg-type]
            if placed is None:  # pragma: no cover - fits_ask() said yes
                continue
            plan, devices, leftover, growth = placed
            pl.memos.devices_of[id(pool)] = devices
            pl.memos.growth_of[id(pool)] = growth
            out.append(((leftover, pool.free_total - need, pool.cluster), pool, plan))
            continue
        if not pool.fits(g, r):
            continue
        planned = pool.plan(g, r)
        if planned is None:  # pragma: no cover - fits() said yes
            continue
        plan, leftover = planned
        out.append(((leftover, pool.free_total - need, pool.cluster), pool, plan))
    out.sort(key=lambda c: c[0])
    return out


def ever_fits(pl: EngineState, model: str, g: int, r: int, ask: tuple[int, ...] = ()) -> bool:
    """Whether the gang could fit on an enabled pool of ``model`` were it empty (static
    within a cycle, so memoised)."""
    key = (model, g, r, ask)
    ever = pl.memos.ever.get(key)
    if ever is None:
        pools = pl.enabled.get(model, ())
        ever = pl.memos.ever[key] = any(
            p.could_ever_fit_ask(ask, r) if p.general and ask else p.could_ever_fit(g, r)  # type: ignore[arg-type]
            for p in pools
        )
    return ever


def capacity_failure(
    pl: EngineState, model: GpuModel, g: int, r: int, ask: tuple[int, ...] = ()
) -> Failure:
    key = (model.key, g, r)
    pools = pl.enabled[model.key]
    if not ever_fits(pl, model.key, g, r, ask):
        return Failure(SkipCode.TOO_LARGE, model)
    if pl.memos.held_by:
        for pool in pools:
            holder = pl.memos.held_by.get(id(pool))
            if holder is not None and pool.fits_without_holds(g, r):
                return Failure(SkipCode.HELD_FOR_OTHER_JOB, model, holder=holder)
    if ask and any(p.general for p in pools):
        key = (model.key, g, r, ask)  # type: ignore[assignment]
    fit0 = pl.memos.fit0.get(key)
    if fit0 is None:
        fit0 = pl.memos.fit0[key] = any(
            pl.initial_general[p.key].fits_ask(ask, r)  # type: ignore[arg-type]
            if p.general and ask
            else fits_counts(pl.initial_counts[p.key], g, r)
            for p in pools
        )
    return Failure(SkipCode.NO_NODE_FITS, model, fit_at_start=fit0)


def still_held(
    pl: EngineState, failure: Failure, g: int, r: int, ask: tuple[int, ...] = ()
) -> Failure:
    """A "held for another job" failure as it stands now. Room only shrinks within a
    cycle: once the gang would not fit even without the holds, what stops it is no room,
    which a job within its nominal quota may reclaim. Read again where it is used, so
    that how a failure is worded, and whether a later job reclaims, does not depend on
    which job of that shape the cycle happened to ask first."""
    now = capacity_failure(pl, failure.model, g, r, ask)
    if now.code is failure.code:
        return failure
    tail = tuple(ask[1:]) if ask else PLAIN
    pl.memos.cap_failed[
        (failure.model.key, g, r) if tail == PLAIN else (failure.model.key, g, r, tail)
    ] = now
    return now


def best_of_ties(
    pl: EngineState,
    job: PendingJob,
    model: GpuModel,
    fitting: list[tuple[tuple[int, int, str], Pool, list[int]]],
    borrowed: int,
    tried: Sequence[GpuModel],
    need: int,
    ask: tuple[int, ...],
    nominal_only: bool,
) -> tuple[GpuModel, list[tuple[tuple[int, int, str], Pool, list[int]]], int]:
    """The first fitting candidate, or a later one the job's policy ranks equal to it
    (same cost, memory and TFLOPS under ``cheapest``; same TFLOPS and cost under
    ``fastest``; never under ``ordered``) whose placement grows the expected
    fragmentation less (then leaves less free on its nodes). Used only with a demand:
    the policy's order says which models a job prefers; among those it does not prefer
    apart, the placement rule decides, as it does between nodes."""
    tie = tie_key(model, job.policy)
    if tie is None:
        return model, fitting, borrowed
    g, r = job.gpus_per_replica, job.replicas

    def score(f: list[tuple[tuple[int, int, str], Pool, list[int]]]) -> tuple[float, int]:
        pool = f[0][1]
        return (pl.memos.growth_of.get(id(pool), 0.0), f[0][0][0])

    best = (score(fitting), model, fitting, borrowed)
    for other in tried[tried.index(model) + 1 :]:
        if tie_key(other, job.policy) != tie:
            continue
        pools = pl.enabled.get(other.key)
        if not pools:
            continue
        lent = pl.quota.fits(job.team, other.key, need)
        if lent < 0 or (nominal_only and lent):
            continue
        alt = fitting_pools(pl, pools, g, r, need, ask)
        if alt and score(alt) < best[0]:
            best = (score(alt), other, alt, lent)
    return best[1], best[2], best[3]


def tie_key(model: GpuModel, policy: Policy) -> tuple[float, ...] | None:
    """What a policy orders candidate models by, bar the key: equal tuples are models the
    policy does not prefer apart (None: every model is its own rank)."""
    if policy is Policy.CHEAPEST:
        return (model.cost_factor, model.memory_gib, model.tflops_fp16)
    if policy is Policy.FASTEST:
        return (model.tflops_fp16, model.cost_factor)
    return None


def fits_now(pool: Pool, g: int, r: int, ask: tuple[int, ...]) -> bool:
    """Whether the gang fits the pool now: by its devices, CPU and memory where it books them."""
    if pool.general and ask:
        return pool.fits_ask(ask, r)  # type: ignore[arg-type]
    return pool.fits(g, r)


def fits_counts(counts: list[int], g: int, r: int) -> bool:
    slots = 0
    for f in range(len(counts) - 1, g - 1, -1):
        if counts[f]:
            slots += counts[f] * (f // g)
            if slots >= r:
                return True
    return False
