"""One scheduling decision over a snapshot: ``decide(snapshot) -> Decision``.

The steps, in order (methods of :class:`Placement`, the state of one decision; what a
snapshot indexes into is ``index``, a team's line order ``lines``, where a gang fits ``fit``,
and preemption, the starvation holds, the wording of reasons and the assembled Decision are
functions of that state in their own modules: ``preemption``, ``holds``, ``wording``,
``assemble``):

1. Index the snapshot into in-cycle state: pools of free GPUs per (cluster, model), the quota
   book, the share book; charge running allocations; mark which of them run on borrowed quota.
2. Build each team's line: its queued jobs by (priority desc, submit time, id), cut at the
   lookback; group them into priority bands; note each band's head if it waited past the
   starvation guard.
3. For each priority band, highest first: (a) progressive filling on nominal quota only, then
   (b) progressive filling of the jobs that need to borrow. Both pop teams from a heap keyed by
   the team's weighted dominant share (recomputed after each admission), FIFO within a team.
4. For each job: resolve candidates, then per candidate model quota (nominal, then borrowing)
   and capacity (gang best fit over enabled clusters). Admit on the first candidate that fits and
   charge pools, quota and share at once, so the next job sees it; else reclaim by preemption
   (evaluated on a copy) when the team is within nominal; else, for a head of line past the
   starvation guard, hold what it lacks (free GPUs on the nodes it would use, the cohort's
   lendable quota) against every job visited after it; else record why it waits.
5. Assemble messages (all text lives in ``reasons``), positions and the not-considered tail.

Why the memos are sound: within one cycle GPUs are only ever taken (admissions, reservations,
holds), never returned, and quota use only grows. So once a (team, model, size) fails quota, a
(model, gang shape) fails capacity, or a preemption search fails, it keeps failing for the rest
of the cycle, and the numbers at the end of the cycle explain every failure seen during it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from rules.engine.assemble import assemble, notes_on_clusters
from rules.engine.candidates import Candidates, resolve_candidates
from rules.engine.capacity import PLAIN, Pool, ask_of, host_rows
from rules.engine.decision import (
    Admission,
    CandidateNote,
    CapacityHold,
    Decision,
    Explanation,
    Preemption,
)
from rules.engine.fit import best_of_ties, capacity_failure, fits_now, fitting_pools, still_held
from rules.engine.holds import HoldPlan, plan_hold
from rules.engine.index import (
    Books,
    NodePools,
    Pools,
    RunningOf,
    books_of,
    index_pools,
    node_pools,
    running_in,
)
from rules.engine.lines import cut_lines, line_order
from rules.engine.placement import Fragmentation, fragmentation_for
from rules.engine.preemption import PreemptionPlan, plan_preemption
from rules.engine.quota import COHORT_SHORT
from rules.engine.reasons import ReasonCode, SkipCode
from rules.engine.snapshot import (
    EngineConfig,
    GpuModel,
    PendingJob,
    Policy,
    Requirement,
    Snapshot,
    Team,
)
from rules.engine.state import Blocked, Failure, Memos, Signature, Victim, Waiting
from rules.engine.victims import sort_reclaimable
from rules.engine.wording import (
    admission_explanation,
)

DEFAULT_CONFIG = EngineConfig()

# What a cluster that takes nothing new is noted as, by its state.


def decide(snapshot: Snapshot, config: EngineConfig = DEFAULT_CONFIG) -> Decision:
    """Decide admissions, preemptions and pending reasons for one cycle.

    Pure: the result depends only on ``snapshot`` and ``config`` (equal inputs give an equal
    Decision, whatever the order of the input tuples); nothing is read from the clock or the
    environment, nothing is mutated.
    """
    return Placement(snapshot, config).run()


class Skip(Protocol):
    """Which jobs of a line an unworded decision visits: one that needs no words may pass
    over the jobs that can admit, reclaim and hold nothing (see ``Placement.worded``)."""

    def prune(self) -> None:
        """Drop from the placement's lines, once they are cut, the jobs that cannot act."""

    def next_in_line(
        self,
        team: str,
        line: list[PendingJob],
        i: int,
        nominal_only: bool,
        deferred: dict[str, list[PendingJob]],
    ) -> int:
        """The index of the next job of ``line`` (from ``i``) worth visiting, ``len(line)``
        when none is; a job passed over that would only be deferred is added to
        ``deferred[team]`` (only when ``nominal_only``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """What a caller hands a :class:`Placement` instead of it deriving it from the snapshot:
    the forecast decides step after step over state it keeps itself, and indexing the nodes,
    charging the running jobs and wording every wait again each step would cost more than
    the steps. ``decide`` passes none."""

    pools: Pools
    books: Books
    running_of: RunningOf
    line_order: Callable[[list[PendingJob]], list[PendingJob]]
    """A team's pending jobs in line order (the forecast keeps most lines in order)."""
    resolved: dict[tuple[object, ...], Candidates]
    """The candidates memo: the models never change between a forecast's steps."""
    skip: Callable[[Placement], Skip] | None = None
    """Makes the :class:`Skip` of an unworded decision; None words every job."""


class Placement:
    """The state of one decision over one snapshot, and the steps that fill it.

    (Named for what it decides, where the jobs go, not ``Cycle``: the scheduling cycle is
    ``scheduling.cycle``, which loads the snapshot, calls :func:`decide` and persists.)
    """

    reuse_words = True
    """False words every pending reason afresh instead of sharing the words of an equal job
    (the reason memo): the straightforward path the tests compare the memoised one with. The
    signature memos stay: they decide when a job is looked at (see :meth:`_evaluate`)."""

    def __init__(
        self, snapshot: Snapshot, config: EngineConfig, inputs: Inputs | None = None
    ) -> None:
        self.snap = snapshot
        self.config = config
        self.inputs = inputs
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        # A wait is a Waiting (worded on the spot) or, on the hot path, a Blocked tuple.
        self.waiting: list[Waiting | Blocked] = []
        self.holds: list[CapacityHold] = []
        self.visited = 0
        self.claimed: set[str] = set()  # running jobs preempted (or waited for) this cycle
        self.final = False  # once true, the waits are being worded (``_assemble``)
        self.memos = Memos()
        self.frag: Fragmentation | None = None  # set by ``_index``, from the pools' sizes
        # (cluster, node) -> (pool, index) of each row of a node that is a row of several
        # pools (one per MIG profile): they share the node's CPU and memory.
        self._host_rows: dict[tuple[str, str], list[tuple[Pool, int]]] | None = None
        self.charged: list[tuple[str, str, int]] = []
        """(team, model, GPUs) of each charge made, in order: what a caller whose books
        outlive the decision takes back (the forecast)."""
        self.line_order: Callable[[list[PendingJob]], list[PendingJob]] = line_order
        self.running_of: RunningOf = running_in(snapshot)
        self.skip: Skip | None = None
        if inputs is not None:
            self.line_order = inputs.line_order
            self.running_of = inputs.running_of
            self.memos.resolved = inputs.resolved
            if inputs.skip is not None:
                self.worded = False
                self.skip = inputs.skip(self)

    # -- step 1 -------------------------------------------------------------------------------

    def _index(self) -> None:
        snap = self.snap
        self.teams: dict[str, Team] = {t.id: t for t in snap.teams}
        inputs = self.inputs
        given = inputs.pools if inputs is not None else index_pools(snap)
        self.pools = given.pools
        self.enabled = given.enabled
        self.unavailable = given.unavailable
        self._pools = given
        capacity = given.capacity
        self.frag = fragmentation_for(snap.demand, capacity)
        self.initial_counts = {
            key: [len(b) for b in pool.buckets]
            for key, pool in self.pools.items()
            if not pool.general
        }
        # Pools booked per device: their start, whole (a count per bucket cannot tell).
        self.initial_general = {
            key: pool.copy() for key, pool in self.pools.items() if pool.general
        }
        books = inputs.books if inputs is not None else books_of(snap, self.config, capacity)
        self.quota, self.shares, self.preempted_gpus = books.quota, books.shares, books.preempting
        self.victims: dict[tuple[str, str, str], list[Victim]] = {}
        self.inflight: dict[tuple[str, str, str], list[Victim]] = {}
        self.protected: dict[tuple[str, str, str], list[Victim]] = {}
        self._reclaim_ready: set[str] = set()
        self.share_before = {t: self.shares.share(t) for t in self.teams}

    def pool_of_node(self) -> NodePools:
        """(cluster, model, node name) -> ``Pool.key``; built when first asked (a reclaim,
        a forecast), not on every decision."""
        given = self._pools
        if given.node_pools is None:
            given.node_pools = node_pools(given.pools)
        return given.node_pools

    def reclaimable(self, model: str) -> None:
        """Sort the running jobs on ``model`` into ``victims``, ``inflight`` and ``protected``
        (see :func:`~rules.engine.victims.sort_reclaimable`); once per model and cycle, when a
        reclaim first looks at it."""
        if model in self._reclaim_ready:
            return
        self._reclaim_ready.add(model)
        found = sort_reclaimable(self, model)
        self.victims.update(found.victims)
        self.inflight.update(found.inflight)
        self.protected.update(found.protected)

    # -- step 2 -------------------------------------------------------------------------------

    def _lines(self) -> None:
        config = self.config
        lines = cut_lines(
            self.snap.pending,
            self.line_order,
            max(0, config.lookback_per_team),
            config.starvation_wait,
            self.snap.now,
            name_beyond=self.worded,  # only the words name the jobs not considered
        )
        self.bands = lines.bands
        self.beyond = lines.beyond
        self.starving = lines.starving
        self.duplicates = lines.duplicates
        self.decided: set[str] = set()
        if self.skip is not None:
            self.skip.prune()

    # -- step 3 -------------------------------------------------------------------------------

    def run(self) -> Decision:
        self._index()
        self._lines()
        for priority in sorted(self.bands, reverse=True):
            # (a) progressive filling on nominal quota only, so that a team's guarantee is
            #     served before anyone borrows it (as Kueue orders non-borrowing entries first);
            deferred = self._fill(self.bands[priority], nominal_only=True)
            # (b) then the jobs that need to borrow, again by share.
            self._fill(deferred, nominal_only=False)
        return self._assemble()

    worded = True
    """``decide`` words every decision: each admission's explanation and each pending job's
    reason, so it visits every job. A placement given a :class:`Skip` (the forecast's steps,
    which need only what starts and what is preempted) leaves the words out and has
    :meth:`_fill` ask it which job of a line to visit next, skipping those that can admit,
    reclaim and hold nothing in this cycle."""

    def _fill(
        self, lines: dict[str, list[PendingJob]], *, nominal_only: bool
    ) -> dict[str, list[PendingJob]]:
        """Visit ``lines`` (one priority band) lowest weighted share first, FIFO within a team.

        A heap of teams keyed by (share, head submit time, head id): after each visit only the
        visited team's share can change, so it alone is pushed back — O(n log teams). Returns the
        jobs deferred because they need to borrow (only when ``nominal_only``).

        The hot path is inline: a job whose signature already failed fails the same way, and
        one whose signature needed to borrow is deferred (see :meth:`_evaluate`); neither
        changes the team's share, so the team stays at the top of the heap unless the heap's
        smallest entry is now smaller than the team's next head.
        """
        deferred: dict[str, list[PendingJob]] = {}
        heap: list[tuple[float, datetime, str, str]] = []
        cursor = dict.fromkeys(lines, 0)
        share = self.shares.share
        decided = self.decided
        dups = self.duplicates
        evaluate = self._evaluate
        starving_ids = self.starving
        failed = self.memos.failed_sig
        deferred_sig = self.memos.deferred_sig
        resolved = self.memos.resolved
        candidates = self._candidates
        wait = self.waiting.append
        admissions = self.admissions
        skip = None if self.skip is None or dups else self.skip.next_in_line
        for team, line in lines.items():
            i = 0
            while i < len(line) and line[i].id in decided:
                i += 1
            cursor[team] = i
            if i < len(line):
                heap.append((share(team), line[i].submitted_at, line[i].id, team))
        heapq.heapify(heap)
        replace_top = heapq.heapreplace
        visited = self.visited
        while heap:
            s, _, _, team = heapq.heappop(heap)
            line = lines[team]
            i = cursor[team]
            n = len(line)
            while True:
                if skip is not None:
                    # A head found worth visiting when its team was last at the top may have
                    # nothing left to do since (others took quota and room): look again, and
                    # give the turn back if the head is now behind the heap's smallest.
                    i = skip(team, line, i, nominal_only, deferred)
                    if i == n:
                        break
                    if heap and heap[0][0] <= s:
                        head = line[i]
                        item = (s, head.submitted_at, head.id, team)
                        if heap[0] < item:
                            cursor[team] = i
                            s, _, _, team = replace_top(heap, item)
                            line = lines[team]
                            i = cursor[team]
                            n = len(line)
                            continue
                job = line[i]
                req = job.requirement
                policy = job.policy
                cands = resolved.get(
                    (
                        req.models,
                        req.min_memory_gib,
                        req.min_tflops_fp16,
                        req.bf16,
                        req.fp8,
                        req.shared,
                        policy,
                    )
                ) or candidates(req, policy)
                n_tried = len(cands.matched) if job.fallback else 1
                tail = (job.share_devices, job.cores_percent, job.cpu_milli, job.memory_mib)
                signature = (
                    (team, id(cands), n_tried, job.gpus_per_replica, job.replicas)
                    if tail == PLAIN
                    else (team, id(cands), n_tried, job.gpus_per_replica, job.replicas, tail)
                )
                starving = job.id in starving_ids
                known = None if starving else failed.get(signature)
                if known is not None:  # an equal job already failed: it fails the same way
                    wait((job, known, cands, n_tried, visited, len(admissions)))
                    visited += 1
                    if dups:
                        decided.add(job.id)
                elif nominal_only and not starving and signature in deferred_sig:
                    deferred.setdefault(team, []).append(job)
                else:
                    self.visited = visited
                    if evaluate(job, cands, n_tried, signature, starving, nominal_only):
                        visited += 1
                        if dups:
                            decided.add(job.id)
                    else:
                        deferred.setdefault(team, []).append(job)
                    s = share(team)
                i += 1
                if dups:
                    while i < n and line[i].id in decided:
                        i += 1
                if i == n:
                    break
                if skip is not None:
                    continue  # passed over and turn given back at the top of the loop
                if heap:
                    # Push the team back and take the smallest; when it is still this team (its
                    # share did not move, as when nothing fits), the heap is not even touched.
                    top = heap[0]
                    if top[0] <= s:
                        head = line[i]
                        item = (s, head.submitted_at, head.id, team)
                        if top < item:
                            cursor[team] = i
                            s, _, _, team = replace_top(heap, item)
                            line = lines[team]
                            i = cursor[team]
                            n = len(line)
        self.visited = visited
        return deferred

    # -- step 4 -------------------------------------------------------------------------------

    def wait(
        self,
        job: PendingJob,
        code: ReasonCode,
        *,
        label: str = "",
        detail: str = "",
        rejected: tuple[CandidateNote, ...] = (),
    ) -> None:
        """Record a wait decided and worded on the spot (held, invalid, preempting...)."""
        self.waiting.append(
            Waiting(
                job,
                code,
                self.visited,
                len(self.admissions),
                label=label,
                detail=detail,
                rejected=rejected,
            )
        )

    def _evaluate(
        self,
        job: PendingJob,
        cands: Candidates,
        n_tried: int,
        signature: Signature,
        starving: bool,
        nominal_only: bool,
    ) -> bool:
        """Decide one job the long way; True when decided (admitted or left waiting with a
        reason), False when deferred to the borrowing pass.

        ``_fill`` has already tried the signature memos: a job whose signature failed fails the
        same way; in the nominal pass, one whose signature needed to borrow is deferred, since
        so does this one (quota use only grows) or it fails, which the borrowing pass finds
        just the same (borrowers never preempt, so deferring changes only when it is looked
        at)."""
        team_id = job.team
        team = self.teams.get(team_id)
        if team is None:
            self.wait(job, ReasonCode.INVALID_JOB, detail=f"team {team_id!r} is unknown")
            return True
        g, r = job.gpus_per_replica, job.replicas
        if g < 1 or r < 1:
            self.wait(job, ReasonCode.INVALID_JOB, detail="it asks for no GPUs")
            return True
        if team.held:
            self.wait(job, ReasonCode.TEAM_HELD)
            return True
        if not cands.matched:
            self.wait(job, ReasonCode.NO_MODEL_MATCHES, rejected=cands.rejected)
            return True
        tried = cands.matched[:n_tried]
        need = g * r
        tail = (job.share_devices, job.cores_percent, job.cpu_milli, job.memory_mib)
        ask = ask_of(g, tail)
        failures: list[Failure] = []
        enabled = self.enabled
        quota_failed = self.memos.quota_failed
        cap_failed = self.memos.cap_failed
        for model in tried:
            key = model.key
            pools = enabled.get(key)
            if not pools:
                f = self.memos.no_cluster.get(key)
                if f is None:
                    f = self.memos.no_cluster[key] = Failure(SkipCode.NO_ENABLED_CLUSTER, model)
                failures.append(f)
                continue
            qkey = (team_id, key)
            qf = quota_failed.get(qkey)
            if qf is not None and need >= qf[0]:
                failures.append(qf[1])
                continue
            borrowed = self.quota.fits(team_id, key, need)
            if borrowed < 0:
                f = qf[1] if qf is not None else Failure(SkipCode.QUOTA_FULL, model)
                quota_failed[qkey] = (need, f)
                failures.append(f)
                continue
            ckey = (key, g, r) if tail == PLAIN else (key, g, r, tail)
            cf = cap_failed.get(ckey)
            if cf is not None:
                if cf.code is SkipCode.HELD_FOR_OTHER_JOB:
                    cf = still_held(self, cf, g, r, ask)
                failures.append(cf)
                continue
            if nominal_only and borrowed:
                if any(p.free_total >= need and fits_now(p, g, r, ask) for p in pools):
                    self.memos.deferred_sig.add(signature)
                    return False  # would borrow: wait for the borrowing pass of this band
                cf = cap_failed[ckey] = capacity_failure(self, model, g, r, ask)
                failures.append(cf)
                continue
            fitting = fitting_pools(self, pools, g, r, need, ask)
            if not fitting:
                cf = cap_failed[ckey] = capacity_failure(self, model, g, r, ask)
                failures.append(cf)
                continue
            if self.frag is not None:
                # With a demand, candidates the policy ranks equal go to the best placement.
                model, fitting, borrowed = best_of_ties(
                    self, job, model, fitting, borrowed, tried, need, ask, nominal_only
                )
            self._admit(job, model, fitting, borrowed, cands, failures, starving, ask)
            return True
        # Reclaim: a team within nominal takes back what borrowers hold.
        if self.config.preemption:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS:
                    reclaim = plan_preemption(self, job, f.model)
                    if reclaim is not None:
                        self._preempt(reclaim)
                        return True
        if starving:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS:
                    hold = plan_hold(self, job, f.model, quota_short=False)
                elif (
                    f.code is SkipCode.QUOTA_FULL
                    and self.quota.fits(team_id, f.model.key, need) == COHORT_SHORT
                ):
                    hold = plan_hold(self, job, f.model, quota_short=True)
                else:
                    continue
                if hold is not None:
                    self._hold(hold)
                    return True
        known = tuple(failures)
        if not starving and all(f.code is not SkipCode.HELD_FOR_OTHER_JOB for f in known):
            # A failure held for another job may be no room for the next job of the same
            # signature (see _still_held): only the others are known to fail the same way.
            self.memos.failed_sig[signature] = known
        self.waiting.append((job, known, cands, n_tried, self.visited, len(self.admissions)))
        return True

    def _candidates(self, req: Requirement, policy: Policy) -> Candidates:
        """resolve_candidates, memoised per cycle by value (a plain tuple key: hashing and
        comparing the frozen dataclass itself runs Python code per lookup)."""
        key = (
            req.models,
            req.min_memory_gib,
            req.min_tflops_fp16,
            req.bf16,
            req.fp8,
            req.shared,  # a share and a whole-GPU job of the same list resolve differently
            policy,
        )
        cands = self.memos.resolved.get(key)
        if cands is None:
            cands = self.memos.resolved[key] = resolve_candidates(req, policy, self.snap.models)
        return cands

    def charge(self, team: str, model: str, need: int) -> None:
        self.charged.append((team, model, need))
        self.quota.add(team, model, need)
        self.shares.add(team, model, need)

    def _preempt(self, plan: PreemptionPlan) -> None:
        """Apply a reclaim: the victims leave the candidate lists, the job's share of the GPUs
        free now on its future nodes is reserved, its quota and share are charged, and it
        waits for the victims to go (or only waits, for a wait-only plan)."""
        job, model, pool = plan.job, plan.model, plan.pool
        if pool is not None:
            for i, gpus in plan.reserve:
                pool.take(i, gpus)
            key = pool.key
            for v in plan.inflight:
                self.inflight[key].remove(v)
                self.claimed.add(v.alloc.job_id)
            for v in plan.victims:
                self.victims[key].remove(v)
                self.claimed.add(v.alloc.job_id)
            self.charge(job.team, model.key, job.gpus)
            self.preempted_gpus += sum(v.alloc.gpus for v in plan.victims)
            self.preemptions.extend(plan.preemptions)
        self.wait(job, plan.code, label=model.label, detail=plan.detail)

    def _hold(self, plan: HoldPlan) -> None:
        """Apply a starvation hold: the cohort's lending and the free GPUs of the nodes the job
        would use are held against every job visited after it."""
        job, model, pool, hold = plan.job, plan.model, plan.pool, plan.hold
        if hold.cohort_gpus:
            self.quota.hold(job.team, model.key, hold.cohort_gpus)
            cohort = self.quota.row(job.team, model.key).cohort
            self.memos.quota_held_by.setdefault((cohort, model.key), job.id)
        if pool is not None:
            for i, h in plan.picks:
                if h:
                    pool.hold(i, h)
            self.memos.held_by.setdefault(id(pool), job.id)
        # A failure may now be "held for another job": classify afresh.
        self.memos.cap_failed = {
            k: f for k, f in self.memos.cap_failed.items() if k[0] != model.key
        }
        self.memos.failed_sig.clear()
        self.memos.held_models.add(model.key)
        self.holds.append(hold)
        self.wait(job, ReasonCode.HOLDING_CAPACITY, label=model.label, detail=plan.detail)

    def _admit(
        self,
        job: PendingJob,
        model: GpuModel,
        fitting: list[tuple[tuple[int, int, str], Pool, list[int]]],
        borrowed: int,
        cands: Candidates,
        failures: list[Failure],
        starving: bool,
        ask: tuple[int, ...] = (),
    ) -> None:
        g = job.gpus_per_replica
        (leftover, _, _), pool, plan = fitting[0]
        # Computed before charging; an unworded step needs no explanation at all.
        cluster_notes = notes_on_clusters(self, model, fitting) if self.worded else None
        device_plan: tuple[str, ...] = ()
        if pool.general and ask:
            devices = self.memos.devices_of[id(pool)]
            for i, devs in zip(plan, devices, strict=True):
                pool.take_ask(i, ask, devs)  # type: ignore[arg-type]
            if pool.cpu is not None or pool.mem is not None:
                self._charge_host_rows(pool, plan, ask)
            if pool.dev is not None:
                device_plan = tuple(
                    pool.device_names(i, devs) for i, devs in zip(plan, devices, strict=True)
                )
        else:
            for i in plan:
                pool.take(i, g)
        self.charge(job.team, model.key, job.gpus)
        if cluster_notes is None:
            explanation = Explanation(model=model.key, cluster=pool.cluster, message="")
        else:  # worded after charging: the notes tell the numbers with this job in them
            explanation = admission_explanation(
                self, job, model, pool.cluster, leftover, borrowed, cands, failures, cluster_notes
            )
        self.admissions.append(
            Admission(
                job_id=job.id,
                team=job.team,
                cluster=pool.cluster,
                model=model.key,
                gpus_per_replica=g,
                node_plan=tuple(pool.names[i] for i in plan),
                borrowed_gpus=borrowed,
                explanation=explanation,
                starvation_guard=starving,
                device_plan=device_plan,
            )
        )

    def _charge_host_rows(self, pool: Pool, plan: list[int], ask: tuple[int, ...]) -> None:
        """Take the CPU and memory ``plan``'s replicas ask off the other rows of their nodes.

        A node offering several MIG profiles is one row per profile, in as many pools, and
        each row reports the node's whole CPU and memory: charged on one row only, a second
        job could be planned on another whose CPU fits apart but not together."""
        rows = self._host_rows
        if rows is None:
            rows = self._host_rows = host_rows(self.pools.values())
        if not rows:
            return
        cpu, mem = ask[3] or 1, ask[4]
        for i in plan:
            for other, j in rows.get((pool.cluster, pool.names[i]), ()):
                if other is not pool:
                    other.charge_host(j, cpu, mem)

    def _assemble(self) -> Decision:
        if not self.worded:  # what starts and what is preempted, no more (see ``worded``)
            return Decision(admissions=tuple(self.admissions), preemptions=tuple(self.preemptions))
        self.final = True
        self.memos.frames = {}
        # id(failures tuple) -> words; the tuples live in self.waiting, so their ids stay unique.
        self.memos.reasons = {}
        return assemble(self)
