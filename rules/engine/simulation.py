"""The state a forecast carries from step to step: the running jobs and when they end, the
free GPUs, the books, and the estimates made so far; and how time advances.

Apart from :mod:`rules.engine.forecast` (which drives the steps) so that the step, which
reads this state, and the driver import in one direction.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rules.engine.candidates import Candidates
from rules.engine.capacity import Pool
from rules.engine.decision import Decision, PendingReason
from rules.engine.durations import Duration
from rules.engine.fairshare import ShareBook
from rules.engine.index import Pools, index_pools, node_pools
from rules.engine.lines import line_order
from rules.engine.quota import QuotaBook
from rules.engine.reasons import count
from rules.engine.snapshot import (
    Cluster,
    PendingJob,
    RunningAllocation,
    Snapshot,
    running_allocation,
)

PREEMPTING_END = timedelta(minutes=1)
"""A job already being preempted gives its GPUs back about this soon (its grace period)."""


PREEMPTED = "the grace period of a job preempted to reclaim its GPUs"


MAY_MOVE = (
    "an estimate, not a promise: sooner if jobs ahead end early or are cancelled, later if "
    "they run longer, a team within its nominal quota reclaims GPUs, or higher-priority work "
    "arrives"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionRules:
    """The pool's preemption rules as the simulation applies them to the jobs it starts and
    preempts (``scheduling.preemption_rules`` reads them from the settings and team
    policies): a job started is protected for its team's minimum runtime, and a job
    preempted keeps its GPUs through its team's grace period, then goes back in line."""

    min_runtime: timedelta = timedelta(0)
    """For teams not in ``team_min_runtime``."""
    team_min_runtime: Mapping[str, timedelta] = field(default_factory=dict)
    grace: timedelta = PREEMPTING_END
    """For teams not in ``team_grace``."""
    team_grace: Mapping[str, timedelta] = field(default_factory=dict)

    def protected_until(self, team: str, started: datetime) -> datetime | None:
        runtime = self.team_min_runtime.get(team, self.min_runtime)
        return started + runtime if runtime > timedelta(0) else None

    def release_after(self, team: str) -> timedelta:
        return max(timedelta(0), self.team_grace.get(team, self.grace))


NO_RULES = PreemptionRules()
"""No minimum runtime, and GPUs back a minute after a preemption."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobForecast:
    """One queued job's estimate: ``start`` is None when none can be made (``why`` says why)."""

    job_id: str
    start: datetime | None
    model: str = ""
    """``GpuModel.key`` it would get ('' without an estimate)."""
    cluster: str = ""
    why: str
    """How it was reached and why it may move, or why there is no estimate."""
    earliest: datetime | None = None
    """The soonest it likely starts: runs ahead ending at the short end of their range."""
    latest: datetime | None = None
    """The latest it likely starts: runs ahead ending at the long end of their range."""
    runs: int = 0
    """Finished runs the runtimes it waits on were learned from (0: none, or it starts now)."""
    unknown: bool = False
    """It waits on a running job that has outlived what was learned: when that one ends is
    not known (``latest`` is its max runtime)."""


@dataclass(slots=True)
class Sim:
    """The mutable state of one simulation (kept apart from the frozen inputs)."""

    free: FreeGpus
    running: dict[str, tuple[RunningAllocation, datetime, str]]
    ends: list[tuple[datetime, str]]
    pending: dict[str, PendingJob]
    quota: QuotaBook
    shares: ShareBook
    """The books as the next step starts from them (``core.books_of``), charged as jobs
    start and stop instead of summed again over every running job. A step charges them
    further as it decides and gives that back when it is done (``forecast_step._give_back``)."""
    requeue: Mapping[str, PendingJob] = field(default_factory=dict)
    """The jobs queued at the start: one the simulation starts and then preempts goes back
    in line, with its submit time, once its grace period is over."""
    wakes: list[datetime] = field(default_factory=list)
    """A heap of the instants when a borrowed job's minimum runtime ends: it may be reclaimed
    then, though nothing ends."""
    returning: set[str] = field(default_factory=set)
    """Those of them being preempted: back in line when their grace period is over."""
    requeued_teams: set[str] = field(default_factory=set)
    """Teams with a job back in line: only their lines in ``pending`` may be out of order."""
    preempting: int = 0
    """GPUs of running jobs that are being preempted."""
    done: dict[str, JobForecast] = field(default_factory=dict)
    spread: dict[str, tuple[datetime, datetime, int, bool]] = field(default_factory=dict)
    """Per running job: when it ends at the soonest and the latest, the runs that was learned
    from, and whether it has outlived them (what a start it opens inherits)."""
    reasons: dict[str, PendingReason] = field(default_factory=dict)
    resolved: dict[tuple[object, ...], Candidates] = field(default_factory=dict)
    """``Memos.resolved`` shared by every step."""
    on: dict[str, dict[str, dict[str, RunningAllocation]]] = field(default_factory=dict)
    """Model -> team -> job id -> its running allocation on the model: what a step's reclaim
    reads (``Inputs.running_of``)."""

    def run(self, alloc: RunningAllocation, end: datetime, basis: str) -> None:
        """``alloc`` runs until ``end`` (its GPUs are already off the nodes' free count)."""
        self.running[alloc.job_id] = (alloc, end, basis)
        self._tally(alloc, 1)

    def stop(self, job_id: str) -> tuple[RunningAllocation, datetime, str] | None:
        """End a running job: its GPUs go back to its nodes; a job preempted that was queued
        at the start goes back in line."""
        held = self.running.pop(job_id, None)
        if held is not None:
            alloc = held[0]
            self._tally(alloc, -1)
            for node in alloc.nodes:
                self.free.add((alloc.cluster, node, alloc.model), alloc.gpus_per_replica)
            if job_id in self.returning:
                self.returning.discard(job_id)
                self.pending[job_id] = self.requeue[job_id]  # out of its line's order
                self.requeued_teams.add(alloc.team)
        return held

    def preempt(self, job_id: str, gone: datetime) -> None:
        """Mark a running job as being preempted: it keeps its GPUs until ``gone`` (the end of
        its grace period), or until it was to end anyway if that is sooner; one queued at the
        start and cut short goes back in line when :meth:`stop` ends it."""
        held = self.running.get(job_id)
        if held is None or held[0].preempting:
            return
        alloc, natural, basis = held
        self._tally(alloc, -1)
        if gone < natural:
            self.run(replace(alloc, preempting=True), gone, PREEMPTED)
            self.spread[job_id] = (gone, gone, 0, False)
            heapq.heappush(self.ends, (gone, job_id))
            if job_id in self.requeue:
                self.returning.add(job_id)
        else:
            self.run(replace(alloc, preempting=True), natural, basis)

    def _tally(self, alloc: RunningAllocation, sign: int) -> None:
        gpus = sign * alloc.replicas * alloc.gpus_per_replica
        self.quota.add(alloc.team, alloc.model, gpus)
        self.shares.add(alloc.team, alloc.model, gpus)
        if alloc.preempting:
            self.preempting += gpus
        jobs = self.on.setdefault(alloc.model, {}).setdefault(alloc.team, {})
        if sign > 0:
            jobs[alloc.job_id] = alloc
        else:
            del jobs[alloc.job_id]
            if not jobs:
                del self.on[alloc.model][alloc.team]


class FreeGpus:
    """Every node's free GPUs as the simulation has them, kept from step to step in the two
    forms a decision reads, each brought up to date only where GPUs moved since it was last
    read (a step starts and ends a few jobs; the pool has thousands of nodes):

    - the engine's pools, which an unworded step copies instead of indexing the nodes again
      (a copy shares the node names, index and totals; only the free counts are new);
    - the snapshot's clusters with replaced nodes, for a worded ``decide``.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.free = {
            (c.id, n.name, n.model): n.free_gpus for c in snapshot.clusters for n in c.nodes
        }
        self.snapshot = snapshot
        self.clusters = snapshot.clusters
        self.nodes = [list(c.nodes) for c in snapshot.clusters]
        self.at: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
        for ci, c in enumerate(snapshot.clusters):
            for ni, n in enumerate(c.nodes):
                self.at.setdefault((c.id, n.name, n.model), []).append((ci, ni))
        self.moved_nodes: set[tuple[str, str, str]] = set()
        index = index_pools(snapshot)
        self.capacity = index.capacity
        self.pools = index.pools
        self.pool_of_node = node_pools(index.pools)
        self.enabled = {m: [p.key for p in ps] for m, ps in index.enabled.items()}
        self.unavailable = {m: [p.key for p in ps] for m, ps in index.unavailable.items()}
        self.slots: dict[tuple[str, str, str], list[tuple[Pool, int]]] = {}
        for pool in self.pools.values():
            for i, name in enumerate(pool.names):
                self.slots.setdefault((pool.cluster, name, pool.model), []).append((pool, i))
        self.moved_slots: set[tuple[str, str, str]] = set()

    def add(self, key: tuple[str, str, str], gpus: int) -> None:
        """``gpus`` more free on node ``key`` (cluster, node, model); fewer when negative."""
        if key in self.free:
            self.free[key] += gpus
            self.moved_nodes.add(key)
            self.moved_slots.add(key)

    def step_pools(self) -> Pools:
        """Copies of the pools as they are now, for a step to take and charge."""
        moved: dict[tuple[str, str, str], dict[int, int]] = {}
        for key in self.moved_slots:
            f = self.free[key]
            for pool, i in self.slots.get(key, ()):
                moved.setdefault(pool.key, {})[i] = f
        self.moved_slots.clear()
        for key, free in moved.items():
            self.pools[key].reset_free(free)
        pools = {key: pool.copy() for key, pool in self.pools.items()}
        return Pools(
            pools,
            {m: [pools[k] for k in keys] for m, keys in self.enabled.items()},
            {m: [pools[k] for k in keys] for m, keys in self.unavailable.items()},
            self.capacity,
            self.pool_of_node,
        )

    def now(self) -> tuple[Cluster, ...]:
        """The clusters with every node's free GPUs as they are now."""
        changed: set[int] = set()
        for key in self.moved_nodes:
            f = self.free[key]
            for ci, ni in self.at[key]:
                original = self.snapshot.clusters[ci].nodes[ni]
                self.nodes[ci][ni] = (
                    original if f == original.free_gpus else replace(original, free_gpus=f)
                )
                changed.add(ci)
        self.moved_nodes.clear()
        if changed:
            self.clusters = tuple(
                replace(c, nodes=tuple(self.nodes[ci])) if ci in changed else c
                for ci, c in enumerate(self.clusters)
            )
        return self.clusters


def start_admitted(
    sim: Sim,
    decision: Decision,
    now: datetime,
    durations: Mapping[str, Duration],
    default: Duration,
    opened: Opened,
    rules: PreemptionRules,
) -> None:
    """Start what the engine admitted at ``now``: charge its nodes, schedule its end, protect
    it for its team's minimum runtime."""
    for adm in decision.admissions:
        job = sim.pending.pop(adm.job_id, None)
        if job is None:
            continue
        duration = durations.get(job.id, default)
        alloc = running_allocation(
            job.id,
            job.team,
            adm.cluster,
            adm.model,
            len(adm.node_plan),
            adm.gpus_per_replica,
            job.priority,
            now,
            adm.node_plan,
            False,
            rules.protected_until(job.team, now),
            job.cpu_milli,
            job.memory_mib,
        )
        for node in adm.node_plan:
            sim.free.add((adm.cluster, node, adm.model), -adm.gpus_per_replica)
        end = now + duration.expected
        early, late, runs, outlived = opened.spread()
        sim.spread[job.id] = (
            early + (duration.low or duration.expected),
            late + (duration.high or duration.expected),
            duration.runs,
            False,
        )
        if alloc.protected_until is not None and adm.borrowed_gpus and alloc.protected_until < end:
            heapq.heappush(sim.wakes, alloc.protected_until)
        sim.run(alloc, end, duration.basis)
        heapq.heappush(sim.ends, (end, job.id))
        # A job back in line after a preemption keeps the estimate of its first start: that is
        # when it leaves the queue, which is what the estimate tells.
        sim.done.setdefault(
            job.id,
            JobForecast(
                job_id=job.id,
                start=now,
                model=adm.model,
                cluster=adm.cluster,
                why=opened.why(job.team),
                earliest=early,
                latest=late,
                runs=runs,
                unknown=outlived,
            ),
        )


def in_lines(jobs: Iterable[PendingJob]) -> dict[str, PendingJob]:
    """Pending jobs by id, team by team and each team's in line order, as a step reads them
    (``Placement.line_order``): a step then need not check the order of every line again."""
    by_team: dict[str, list[PendingJob]] = {}
    for job in jobs:
        by_team.setdefault(job.team, []).append(job)
    return {job.id: job for line in by_team.values() for job in line_order(line)}


@dataclass(frozen=True)
class Freed:
    """A running job the simulation ended at a step, whose GPUs may open the way."""

    job_id: str
    team: str
    end: datetime
    basis: str
    earliest: datetime | None = None
    latest: datetime | None = None
    runs: int = 0
    outlived: bool = False


@dataclass(frozen=True)
class Opened:
    """Why the jobs a step starts start then: at once, or once the running jobs it ended
    gave their GPUs back (or a borrowed job's protection ran out)."""

    now: datetime
    start: datetime
    freed: tuple[Freed, ...] = ()
    _said: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _spread: list[tuple[datetime, datetime, int, bool]] = field(
        default_factory=list, compare=False, repr=False
    )

    def spread(self) -> tuple[datetime, datetime, int, bool]:
        """When a job this step starts likely starts at the soonest and the latest (the jobs
        it ended all ending at the short or the long end of their ranges), the runs those
        were learned from (the fewest), and whether one has outlived what was learned."""
        if self._spread:
            return self._spread[0]
        if not self.freed:
            return self.start, self.start, 0, False
        self._spread.append(self._spread_of())
        return self._spread[0]

    def _spread_of(self) -> tuple[datetime, datetime, int, bool]:
        early = max(f.earliest or f.end for f in self.freed)
        late = max(f.latest or f.end for f in self.freed)
        return (
            max(self.now, min(early, self.start)),
            max(late, self.start),
            min(f.runs for f in self.freed),
            any(f.outlived for f in self.freed),
        )

    def why(self, team: str) -> str:
        """Worded for a job of ``team``: a running job of the same team is named, one of
        another team only by its team (one team never sees another team's jobs)."""
        said = self._said.get(team)
        if said is None:
            said = self._said[team] = self._words(team)
        return said

    def _words(self, team: str) -> str:
        if self.start == self.now:
            return (
                "it would be admitted in the next cycle: the engine finds room for it now "
                f"({MAY_MOVE})"
            )
        if not self.freed:
            return (
                f"at {self.start:%Y-%m-%d %H:%M} UTC, once a borrowed job's minimum runtime is "
                f"over and its GPUs may be reclaimed ({MAY_MOVE})"
            )
        first = next((f for f in self.freed if f.team == team), self.freed[0])
        named = f"job {first.job_id[:8]}" if first.team == team else f"a job of team {first.team}"
        extra = len(self.freed) - 1
        who = f"{named} and {count(extra, 'other job')} end" if extra else f"{named} ends"
        return f"once {who}, expected by {first.end:%Y-%m-%d %H:%M} UTC ({first.basis}); {MAY_MOVE}"


def state_at(snapshot: Snapshot, sim: Sim, t: datetime, *, whole: bool = True) -> Snapshot:
    """The snapshot as the simulation has the pool at ``t``. Not ``whole``: the clusters
    and running jobs are left as the first snapshot has them, for a step
    (``forecast_step.decide_step``), which reads both from ``sim`` instead."""
    if not whole:
        return replace(snapshot, now=t, pending=tuple(sim.pending.values()))
    return replace(
        snapshot,
        now=t,
        clusters=sim.free.now(),
        running=tuple(a for a, _, _ in sim.running.values()),
        pending=tuple(sim.pending.values()),
    )


def advance(sim: Sim, quantum: timedelta) -> tuple[list[Freed], datetime | None]:
    """End every running job due within ``quantum`` of the next event; returns those ended and
    the instant of the next step (None when nothing is left to happen). An event is an
    expected end or the end of a borrowed job's protection (it may be reclaimed then, though
    nothing ends); the step is at the last event it takes in, so that all of them are true."""
    ends = sim.ends
    while ends:
        end, job_id = ends[0]
        held = sim.running.get(job_id)
        if held is not None and held[1] == end:
            break
        heapq.heappop(ends)  # stopped or preempted meanwhile: a stale entry
    wakes = sim.wakes
    if not ends and not wakes:
        return [], None
    first = min(ends[0][0] if ends else wakes[0], wakes[0] if wakes else ends[0][0])
    limit = first + quantum
    at = first
    while wakes and wakes[0] <= limit:
        at = max(at, heapq.heappop(wakes))
    freed: list[Freed] = []
    while ends:
        end, job_id = ends[0]
        held = sim.running.get(job_id)
        if held is None or held[1] != end:
            heapq.heappop(ends)
            continue
        if end > limit:
            break
        heapq.heappop(ends)
        sim.stop(job_id)
        early, late, runs, outlived = sim.spread.get(job_id, (end, end, 0, False))
        freed.append(Freed(job_id, held[0].team, end, held[2], early, late, runs, outlived))
        at = max(at, end)
    return freed, at
