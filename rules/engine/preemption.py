"""Preemption: reclaiming nominal quota from other teams' borrowed jobs so that a job fits.

Kept apart from the placement loop, as Kueue and Armada keep theirs: :func:`plan_preemption`
works out the victims on a copy (a what-if over the pool's free GPUs) and returns a
:class:`PreemptionPlan`; only a set that makes the gang fit is planned, and ``core`` applies
it to the placement's state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rules.engine import reasons
from rules.engine.capacity import Pool
from rules.engine.decision import (
    Preemption,
)
from rules.engine.placement import UNBOUNDED
from rules.engine.reasons import PreemptionCode, ReasonCode
from rules.engine.snapshot import GpuModel, PendingJob, RunningAllocation
from rules.engine.state import EngineState, Victim


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """What a reclaim does for a job: the victims it preempts, the GPUs it reserves now on the
    nodes the job will use, and the words of the job's wait. Only a wait (no pool) when
    the reclaim must wait for a minimum runtime or for the preemption budget."""

    job: PendingJob
    model: GpuModel
    code: ReasonCode
    detail: str
    pool: Pool | None = None
    reserve: tuple[tuple[int, int], ...] = ()
    """(node index in ``pool``, GPUs free there now taken for the job)."""
    inflight: tuple[Victim, ...] = ()
    """Jobs already being preempted whose GPUs the job counts on (no new preemption)."""
    victims: tuple[Victim, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    """One per victim, worded."""


def plan_preemption(pl: EngineState, job: PendingJob, model: GpuModel) -> PreemptionPlan | None:
    """How to reclaim nominal quota from borrowers so that ``job`` fits; None when no reclaim
    can. Reads the state (and fills the memos of what cannot be reclaimed); ``core``
    applies the plan.

    Rule: only for a job whose team stays within nominal on this model with it; victims are
    other teams' jobs on borrowed quota in one enabled cluster (jobs already being preempted
    are used first, for free); lowest priority, then most recently started first; the set is
    then minimised by dropping any victim not needed. Fewest victims wins across clusters.
    """
    g, r, need = job.gpus_per_replica, job.replicas, job.gpus
    row = pl.quota.row(job.team, model.key)
    if row.used + need > row.nominal:
        return None
    host = (max(1, job.cpu_milli), job.memory_mib)
    memo_key = (model.key, g, r, host)
    if memo_key in pl.memos.preempt_failed:
        return None
    pl.reclaimable(model.key)
    best = _best_reclaim(pl, model, g, r, host)
    if best is None:
        waiting = _wait_for_protected(pl, job, model)
        if waiting is None:
            pl.memos.preempt_failed.add(memo_key)
        return waiting
    pool, used_inflight, used_victims, plan = best
    over = _over_budget(pl, job, model, used_victims)
    if over is not None:
        return over
    used = row.used + need  # the team's use once the job is charged
    preemptions = tuple(
        Preemption(
            job_id=v.alloc.job_id,
            team=v.alloc.team,
            cluster=v.alloc.cluster,
            model=v.alloc.model,
            for_job=job.id,
            for_team=job.team,
            code=PreemptionCode.RECLAIM_NOMINAL,
            message=reasons.msg_preempted(
                v.alloc.team,
                model.label,
                v.alloc.gpus,
                v.alloc.cluster,
                job.team,
                used,
                row.nominal,
                shared=job.requirement.shared,
            ),
        )
        for v in used_victims
    )
    detail = reasons.detail_preempting(
        len(used_victims),
        len(used_inflight),
        pool.cluster,
        used,
        row.nominal,
        " GiB" if job.requirement.shared else "",
    )
    return PreemptionPlan(
        job,
        model,
        ReasonCode.PREEMPTING,
        detail,
        pool,
        _reserve(pool, plan, g),
        tuple(used_inflight),
        tuple(used_victims),
        preemptions,
    )


def _best_reclaim(
    pl: EngineState, model: GpuModel, g: int, r: int, host: Host
) -> tuple[Pool, list[Victim], list[Victim], list[int]] | None:
    """The cluster to reclaim in and how: (pool, in-flight preemptions used, victims, node
    index per replica of the gang once they are gone).

    Rank across clusters: fewest victims, lowest sum of their priorities, least leftover on
    the nodes used, cluster id. The placement (for the leftover) is worked out only for the
    clusters tied on the first two."""
    found: list[tuple[tuple[int, int], Pool, list[Victim], list[Victim], dict[int, int]]] = []
    for pool in pl.enabled.get(model.key, ()):
        if pool.max_total < g:
            continue
        key = pool.key
        inflight = pl.inflight.get(key, [])
        # No own-team job can be a victim: a team within nominal with this job has none
        # above nominal on this model (borrowed flags count from the cycle's start).
        victims = pl.victims.get(key, [])
        if not inflight and not victims:
            continue
        chosen = _what_if(pool, g, r, inflight, victims, host)
        if chosen is not None:
            used_inflight, used_victims, released = chosen
            rank = (len(used_victims), sum(v.alloc.priority for v in used_victims))
            found.append((rank, pool, used_inflight, used_victims, released))
    best: tuple[tuple[int, str], Pool, list[Victim], list[Victim], list[int]] | None = None
    if found:
        least = min(f[0] for f in found)
        for rank, pool, used_inflight, used_victims, released in found:
            if rank != least:
                continue
            placed = (
                _plan_released_host(pool, [*used_inflight, *used_victims], g, r, host)
                if _books_host(pool)
                else _plan_released(pool, released, g, r)
            )
            if placed is None:  # pragma: no cover - the slot count said it fits
                continue
            plan, leftover = placed
            tie = (leftover, pool.cluster)
            if best is None or tie < best[0]:
                best = (tie, pool, used_inflight, used_victims, plan)
    return None if best is None else best[1:]


def _reserve(pool: Pool, plan: list[int], g: int) -> tuple[tuple[int, int], ...]:
    """The job's share of the GPUs free now on its future nodes: taken at once, so that no
    later job of the cycle is placed on what the victims' release is meant for."""
    per_node: dict[int, int] = {}
    for i in plan:
        per_node[i] = per_node.get(i, 0) + g
    out = []
    for i, gpus in sorted(per_node.items()):
        reserve = min(gpus, pool.free[i])
        if reserve:
            out.append((i, reserve))
    return tuple(out)


def _wait_for_protected(pl: EngineState, job: PendingJob, model: GpuModel) -> PreemptionPlan | None:
    """A MIN_RUNTIME wait when borrowed jobs still within their team's minimum runtime would
    make room: the claimer is told when the last of them it needs may go, instead of a bare
    "no capacity". Memoised per (model, gang shape), like the search."""
    g, r = job.gpus_per_replica, job.replicas
    host = (max(1, job.cpu_milli), job.memory_mib)
    key = (model.key, g, r, host)
    if key in pl.memos.protected:
        until = pl.memos.protected[key]
    else:
        until = None
        for pool in pl.enabled.get(model.key, ()):
            protected = pl.protected.get(pool.key)
            if not protected or pool.max_total < g:
                continue
            victims = sorted(
                (*pl.victims.get(pool.key, ()), *protected),
                key=lambda v: v.sort_key,
            )
            chosen = _what_if(pool, g, r, pl.inflight.get(pool.key, []), victims, host)
            if chosen is None:
                continue
            ends = [v.alloc.protected_until for v in chosen[1] if v.alloc.protected_until]
            free_at = max((t for t in ends if t > pl.snap.now), default=None)
            if free_at is not None and (until is None or free_at < until):
                until = free_at
        pl.memos.protected[key] = until
    if until is None:
        return None
    detail = reasons.detail_min_runtime(until, until - pl.snap.now)
    return PreemptionPlan(job, model, ReasonCode.MIN_RUNTIME, detail)


def _over_budget(
    pl: EngineState, job: PendingJob, model: GpuModel, victims: list[Victim]
) -> PreemptionPlan | None:
    """A PREEMPTION_BUDGET wait when preempting ``victims`` would take this cycle's preempted
    GPUs past ``EngineConfig.preemption_budget_gpus``.

    GPUs still being preempted from earlier cycles count, so a burst of cycles does not
    multiply the budget. A reclaim larger than the whole budget is let through when nothing
    else is being preempted, so one big gang is never starved by the budget; it then goes
    alone. Not memoised: another job may need fewer GPUs released.
    """
    budget = pl.config.preemption_budget_gpus
    gpus = sum(v.alloc.gpus for v in victims)
    spent = pl.preempted_gpus
    if budget is None or not victims or spent + gpus <= budget or spent == 0:
        return None
    detail = reasons.detail_preemption_budget(len(victims), gpus, budget, spent)
    return PreemptionPlan(job, model, ReasonCode.PREEMPTION_BUDGET, detail)


Host = tuple[int, int]
"""(milli-CPU, MiB) a claimer's replica asks of its node's host (CPU at least 1)."""


def _what_if(
    pool: Pool,
    g: int,
    r: int,
    inflight: list[Victim],
    victims: list[Victim],
    host: Host = (1, 0),
) -> tuple[list[Victim], list[Victim], dict[int, int]] | None:
    """Find victims whose release lets the gang fit in ``pool``, on a copy of its free GPUs:
    (in-flight preemptions used, victims chosen, node -> free GPUs once they are released).

    Greedy in order (in-flight preemptions first, then victims by priority and recency), then
    minimised: each chosen victim whose release is not needed is dropped again. Counts slots
    (replicas that fit) only; :func:`_plan_released` places the gang. Where the pool's nodes
    report their CPU or memory, :func:`_what_if_host` counts those too.
    """
    if _books_host(pool):
        return _what_if_host(pool, g, r, inflight, victims, host)
    released: dict[int, int] = {}
    base = pool.free
    total = pool.total
    buckets = pool.buckets
    slots = 0
    for f in range(g, len(buckets)):
        slots += len(buckets[f]) * (f // g)
    chosen: list[Victim] = []
    for v in (*inflight, *victims):
        if slots >= r:
            break
        gv = v.alloc.gpus_per_replica
        for i in v.nodes:
            t, b, rel = total[i], base[i], released.get(i, 0)
            before = (b + rel if b + rel < t else t) // g
            rel += gv
            released[i] = rel
            slots += (b + rel if b + rel < t else t) // g - before
        chosen.append(v)
    if slots < r:
        return None
    for v in reversed(chosen):
        # Would the gang still fit without this victim?
        gv = v.alloc.gpus_per_replica
        delta = 0
        for i in v.nodes:
            t, b, rel = total[i], base[i], released[i]
            before = (b + rel if b + rel < t else t) // g
            rel -= gv
            released[i] = rel
            delta += (b + rel if b + rel < t else t) // g - before
        if slots + delta >= r:
            slots += delta
            chosen.remove(v)
        else:
            for i in v.nodes:
                released[i] += gv
    free = {}
    for i, rel in released.items():
        f = base[i] + rel
        free[i] = f if f < total[i] else total[i]
    inflight_ids = {id(v) for v in inflight}
    return (
        [v for v in chosen if id(v) in inflight_ids],
        [v for v in chosen if id(v) not in inflight_ids],
        free,
    )


def _plan_released(
    pool: Pool, released: dict[int, int], g: int, r: int
) -> tuple[list[int], int] | None:
    """Best-fit placement in ``pool`` once the nodes of ``released`` have the free GPUs it
    gives them: (node index per replica, leftover GPUs on the nodes used).

    The same order as :meth:`Pool.plan` over a plain copy: fewest free GPUs that still take a
    replica first, then node index.
    """
    return _best_fit(_room_released(pool, released, g), g, r)


def _room_released(pool: Pool, released: dict[int, int], g: int) -> Iterator[tuple[int, int, int]]:
    """(free GPUs, node index, replicas it takes) of each node that takes one once
    ``released`` is given back, in best-fit order; the pool's buckets are walked, not its
    nodes, and only as far as the gang needs."""
    extra: dict[int, list[int]] = {}
    for i, f in released.items():
        if f >= g:
            extra.setdefault(f, []).append(i)
    buckets = pool.buckets
    for f in range(g, len(buckets)):
        bucket = buckets[f]
        more = extra.get(f)
        if not bucket and not more:
            continue
        nodes = [i for i in bucket if i not in released]
        if more:
            nodes.extend(more)
        nodes.sort()
        per_node = f // g
        for i in nodes:
            yield f, i, per_node


def _best_fit(room: Iterable[tuple[int, int, int]], g: int, r: int) -> tuple[list[int], int] | None:
    """The gang placed over ``room`` ((free GPUs, node index, replicas it takes), in best-fit
    order), as many replicas on each node as it takes: (node index per replica, leftover
    GPUs on the nodes used); None when the room is too little. The one walk of both
    :func:`_plan_released` and :func:`_plan_released_host`, so that they place alike."""
    chosen: list[int] = []
    leftover = 0
    remaining = r
    for f, i, n in room:
        k = n if n < remaining else remaining
        chosen.extend([i] * k)
        leftover += f - k * g
        remaining -= k
        if remaining == 0:
            return chosen, leftover
    return None


def _books_host(pool: Pool) -> bool:
    """Whether a reclaim in ``pool`` must count its nodes' CPU and memory: they report them
    and the pool books whole GPUs (a pool booked per device is counted in GPUs, as before)."""
    return pool.dev is None and (pool.cpu is not None or pool.mem is not None)


class _HostSlots:
    """Replicas of one shape each node of a pool takes once some victims are gone: the
    fewest of its free GPUs, CPU and memory allow, each with what the victims give back."""

    __slots__ = ("cpu", "free", "g", "mem", "need_cpu", "need_mem", "total")

    def __init__(self, pool: Pool, g: int, host: Host) -> None:
        self.free, self.total, self.g = pool.free, pool.total, g
        self.cpu, self.mem = pool.cpu, pool.mem
        self.need_cpu, self.need_mem = host

    def at(self, i: int, gpus: int, cpu: int, mem: int) -> int:
        """Replicas node ``i`` takes with ``gpus``, ``cpu`` and ``mem`` given back to it."""
        f = self.free[i] + gpus
        t = self.total[i]
        n = (f if f < t else t) // self.g
        if self.cpu is not None and self.cpu[i] != UNBOUNDED:
            n = min(n, (self.cpu[i] + cpu) // self.need_cpu)
        if self.mem is not None and self.mem[i] != UNBOUNDED and self.need_mem > 0:
            n = min(n, (self.mem[i] + mem) // self.need_mem)
        return n if n > 0 else 0


def _what_if_host(
    pool: Pool, g: int, r: int, inflight: list[Victim], victims: list[Victim], host: Host
) -> tuple[list[Victim], list[Victim], dict[int, int]] | None:
    """:func:`_what_if` where nodes report CPU or memory: a victim gives back its GPUs and
    its CPU and memory on each of its nodes, and a node takes the replicas all three allow.
    Without this, a reclaim on a node whose CPU is held by others (pods the portal did not
    create, or a claimer asking more CPU than a victim frees) preempted jobs for room the
    claimer still could not start in."""
    slots_at = _HostSlots(pool, g, host).at
    released: dict[int, list[int]] = {}  # node -> [GPUs, milli-CPU, MiB] given back
    slots = sum(slots_at(i, 0, 0, 0) for i in range(len(pool.free)))
    chosen: list[Victim] = []

    def give(v: Victim, sign: int) -> int:
        delta = 0
        for i in v.nodes:
            rel = released.setdefault(i, [0, 0, 0])
            before = slots_at(i, *rel)
            _give_back(rel, v.alloc, sign)
            delta += slots_at(i, *rel) - before
        return delta

    for v in (*inflight, *victims):
        if slots >= r:
            break
        slots += give(v, 1)
        chosen.append(v)
    if slots < r:
        return None
    for v in reversed(chosen):
        delta = give(v, -1)  # would the gang still fit without this victim?
        if slots + delta >= r:
            slots += delta
            chosen.remove(v)
        else:
            give(v, 1)
    free: dict[int, int] = {}
    for i, (gpus, _, _) in released.items():
        f = pool.free[i] + gpus
        free[i] = f if f < pool.total[i] else pool.total[i]
    inflight_ids = {id(v) for v in inflight}
    return (
        [v for v in chosen if id(v) in inflight_ids],
        [v for v in chosen if id(v) not in inflight_ids],
        free,
    )


def _give_back(rel: list[int], a: RunningAllocation, sign: int) -> None:
    """Add (``sign`` 1) or take off (-1) one replica of ``a`` to a node's [GPUs, milli-CPU,
    MiB] given back."""
    rel[0] += sign * a.gpus_per_replica
    rel[1] += sign * a.cpu_milli
    rel[2] += sign * a.memory_mib


def _plan_released_host(
    pool: Pool, gone: list[Victim], g: int, r: int, host: Host
) -> tuple[list[int], int] | None:
    """:func:`_plan_released` where nodes report CPU or memory: best fit over the replicas
    each node takes once ``gone`` have given back their GPUs, CPU and memory (fewest free
    GPUs that still take a replica first, then node index)."""
    slots_at = _HostSlots(pool, g, host).at
    released: dict[int, list[int]] = {}
    for v in gone:
        for i in v.nodes:
            _give_back(released.setdefault(i, [0, 0, 0]), v.alloc, 1)
    room = []
    for i in range(len(pool.free)):
        rel = released.get(i, (0, 0, 0))
        n = slots_at(i, *rel)
        if n:
            f = pool.free[i] + rel[0]
            room.append((f if f < pool.total[i] else pool.total[i], i, n))
    room.sort()
    return _best_fit(room, g, r)
