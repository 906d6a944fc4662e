"""One scheduling decision over a snapshot: ``decide(snapshot) -> Decision``.

The steps, in order (each is one method of :class:`_Cycle`):

1. Index the snapshot into in-cycle state: pools of free GPUs per (cluster, model), the quota
   book, the share book; charge running allocations; mark which of them run on borrowed quota.
2. Build each team's line: its queued jobs by (priority desc, submit time, id), cut at the
   lookback; find the heads that waited past the starvation guard.
3. Visit jobs in line order from a heap of teams keyed by (priority of the team's next job,
   the team's weighted dominant share, submit time, id). When a priority band starts, its
   starving heads go first (admitted, or capacity is held for them).
4. For each job: resolve candidates, then per candidate model quota (nominal, then borrowing)
   and capacity (gang best fit over enabled clusters). Admit on the first candidate that fits and
   charge pools, quota and share at once, so the next job sees it; else reclaim by preemption
   (evaluated on a copy) when the team is within nominal; else record why it waits.
5. Assemble messages (in ``reasons``), positions and the not-considered tail.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduling.engine import reasons
from scheduling.engine.candidates import Candidates, resolve_candidates
from scheduling.engine.capacity import Pool, fits_free
from scheduling.engine.decision import (
    Admission,
    CandidateNote,
    CapacityHold,
    ClusterNote,
    Decision,
    Explanation,
    NotConsidered,
    PendingReason,
    Preemption,
    TeamShare,
)
from scheduling.engine.fairshare import ShareBook
from scheduling.engine.quota import QuotaBook
from scheduling.engine.reasons import ClusterNoteCode, PreemptionCode, ReasonCode, SkipCode
from scheduling.engine.snapshot import (
    ClusterState,
    EngineConfig,
    GpuModel,
    Node,
    PendingJob,
    Policy,
    Requirement,
    RunningAllocation,
    Snapshot,
    Team,
)

DEFAULT_CONFIG = EngineConfig()

# The candidate failure "closest to running" explains the job: lower rank wins.
_RANK = {
    SkipCode.HELD_FOR_OTHER_JOB: 0,
    SkipCode.NO_NODE_FITS: 1,
    SkipCode.COHORT_CANNOT_LEND: 2,
    SkipCode.QUOTA_FULL: 3,
    SkipCode.NO_ENABLED_CLUSTER: 4,
    SkipCode.TOO_LARGE: 5,
}


_MAX_OTHERS = 3  # other tried candidates named in a pending message; all are in `candidates`


def decide(snapshot: Snapshot, config: EngineConfig = DEFAULT_CONFIG) -> Decision:
    """Decide admissions, preemptions and pending reasons for one cycle.

    Pure: the result depends only on ``snapshot`` and ``config`` (equal inputs give an equal
    Decision); nothing is read from the clock or the environment, nothing is mutated.
    """
    return _Cycle(snapshot, config).run()


@dataclass(slots=True)
class _Failure:
    """Why one candidate model did not take the job (formatted only at the end)."""

    code: SkipCode
    model: GpuModel
    fit_at_start: bool = False
    holder: str = ""


@dataclass(slots=True)
class _Waiting:
    """A job left pending, with what its message needs."""

    job: PendingJob
    code: ReasonCode
    ahead: int
    admitted_ahead: int
    label: str = ""
    detail: str = ""
    failures: tuple[_Failure, ...] = ()
    rejected: tuple[CandidateNote, ...] = ()
    skipped_fallback: tuple[GpuModel, ...] = ()


class _Victim:
    """A running allocation that could be preempted, with its node indices in its pool."""

    __slots__ = ("alloc", "nodes", "sort_key")

    def __init__(self, alloc: RunningAllocation, nodes: list[int]) -> None:
        self.alloc = alloc
        self.nodes = nodes
        # Lowest priority first, then most recently started, then id (deterministic).
        self.sort_key = (alloc.priority, -alloc.started_at.timestamp(), alloc.job_id)


class _Cycle:
    def __init__(self, snapshot: Snapshot, config: EngineConfig) -> None:
        self.snap = snapshot
        self.config = config
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waiting: list[_Waiting] = []
        self.holds: list[CapacityHold] = []
        self.visited = 0
        self._resolved: dict[tuple[Requirement, Policy], Candidates] = {}
        self._no_fit_memo: dict[tuple[str, int, int], int] = {}
        self._fit0_memo: dict[tuple[str, int, int], bool] = {}
        self._ever_memo: dict[tuple[str, int, int], bool] = {}
        self._preempt_memo: dict[tuple[str, int, int], int] = {}
        self._held_by: dict[int, str] = {}  # id(pool) -> holder job id
        self._free_cache: dict[str, tuple[int, int]] = {}
        self._final = False
        self.claimed: set[str] = set()  # running jobs already preempted or claimed this cycle

    # -- step 1 -------------------------------------------------------------------------------

    def _index(self) -> None:
        snap = self.snap
        self.models = {m.key: m for m in snap.models}
        self.teams: dict[str, Team] = {t.id: t for t in snap.teams}
        self.pools: dict[tuple[str, str], Pool] = {}
        self.enabled: dict[str, list[Pool]] = {}
        self.unavailable: dict[str, list[Pool]] = {}
        capacity: dict[str, int] = {}
        for cluster in sorted(snap.clusters, key=lambda c: c.id):
            by_model: dict[str, list[Node]] = {}
            for node in cluster.nodes:
                by_model.setdefault(node.model, []).append(node)
            for model in sorted(by_model):
                pool = Pool(cluster.id, cluster.state, model, by_model[model])
                self.pools[(cluster.id, model)] = pool
                capacity[model] = capacity.get(model, 0) + pool.total_gpus
                target = self.enabled if cluster.state is ClusterState.ENABLED else self.unavailable
                target.setdefault(model, []).append(pool)
        self.version = dict.fromkeys(capacity, 0)
        self.initial_counts = {
            key: [len(b) for b in pool.buckets] for key, pool in self.pools.items()
        }
        team_cohort = {t.id: t.cohort for t in snap.teams}
        self.quota = QuotaBook(team_cohort, snap.quotas, snap.cohort_quotas)
        usage: dict[str, float] = {}
        for u in snap.usage:
            usage[u.team] = usage.get(u.team, 0.0) + max(0.0, u.weighted_gpu_hours)
        cost = {m.key: m.cost_factor for m in snap.models}
        self.shares = ShareBook(
            capacity,
            cost,
            {t.id: t.weight for t in snap.teams},
            usage,
            self.config.usage_half_life,
            self.config.usage_weight,
        )
        by_team_model: dict[tuple[str, str], list[RunningAllocation]] = {}
        for a in snap.running:
            self.quota.add(a.team, a.model, a.gpus)
            self.shares.add(a.team, a.model, a.gpus)
            by_team_model.setdefault((a.team, a.model), []).append(a)
        self.quota.start()
        # Which running jobs are on borrowed quota: count each team's jobs on a model in start
        # order; a job any of whose GPUs lies above nominal is borrowed (the newest are).
        self.victims: dict[tuple[str, str], list[_Victim]] = {}
        self.inflight: dict[tuple[str, str], list[_Victim]] = {}
        self.borrowed_jobs: set[str] = set()
        for (team, model), allocs in by_team_model.items():
            nominal = self.quota.row(team, model).nominal
            allocs.sort(key=lambda a: (a.started_at, a.job_id))
            cumulative = 0
            for a in allocs:
                cumulative += a.gpus
                borrowed = cumulative > nominal
                if borrowed:
                    self.borrowed_jobs.add(a.job_id)
                home = self.pools.get((a.cluster, model))
                if home is None or home.state is not ClusterState.ENABLED or not a.nodes:
                    continue
                indices = [home.index[n] for n in a.nodes if n in home.index]
                if a.preempting:
                    self.inflight.setdefault((a.cluster, model), []).append(_Victim(a, indices))
                elif borrowed:
                    self.victims.setdefault((a.cluster, model), []).append(_Victim(a, indices))
        for lst in (*self.victims.values(), *self.inflight.values()):
            lst.sort(key=lambda v: v.sort_key)
        self.share_before = {t: self.shares.share(t) for t in self.teams}

    # -- step 2 -------------------------------------------------------------------------------

    def _lines(self) -> None:
        lookback = max(0, self.config.lookback_per_team)
        grouped: dict[str, list[PendingJob]] = {}
        for job in self.snap.pending:
            grouped.setdefault(job.team, []).append(job)
        # bands[priority][team] = that team's considered jobs of that priority, in line order.
        self.bands: dict[int, dict[str, list[PendingJob]]] = {}
        self.beyond: dict[str, tuple[str, ...]] = {}
        self.starving: dict[int, list[PendingJob]] = {}
        guard = self.config.starvation_wait
        now = self.snap.now
        for team in sorted(grouped):
            jobs = grouped[team]
            jobs.sort(key=_line_key)
            if len(jobs) > lookback:
                self.beyond[team] = tuple(j.id for j in jobs[lookback:])
                del jobs[lookback:]
            for job in jobs:
                band = self.bands.setdefault(job.priority, {})
                line = band.get(team)
                if line is None:
                    line = band[team] = []
                    # The head of the team's line in this band: the starvation guard's subject.
                    if now - job.submitted_at >= guard:
                        self.starving.setdefault(job.priority, []).append(job)
                line.append(job)
        for heads in self.starving.values():
            heads.sort(key=lambda j: (j.submitted_at, j.id))
        self.decided: set[str] = set()

    # -- step 3 -------------------------------------------------------------------------------

    def run(self) -> Decision:
        self._index()
        self._lines()
        for priority in sorted(self.bands, reverse=True):
            # (a) heads past the starvation guard, oldest first: admitted or capacity held;
            for job in self.starving.get(priority, ()):
                self._visit(job, starving=True, nominal_only=False)
            # (b) progressive filling on nominal quota only, so that a team's guarantee is
            #     served before anyone borrows it (as Kueue orders non-borrowing entries first);
            deferred = self._fill(self.bands[priority], nominal_only=True)
            # (c) then the jobs that need to borrow, again by share.
            self._fill(deferred, nominal_only=False)
        return self._assemble()

    def _fill(
        self, lines: dict[str, list[PendingJob]], *, nominal_only: bool
    ) -> dict[str, list[PendingJob]]:
        """Visit ``lines`` (one priority band) lowest weighted share first, FIFO within a team.

        A heap of teams keyed by (share, head submit time, head id): after each visit only the
        visited team's share can change, so it alone is pushed back — O(n log teams). Returns the
        jobs deferred because they need to borrow (only when ``nominal_only``).
        """
        deferred: dict[str, list[PendingJob]] = {}
        heap: list[tuple[float, datetime, str, str]] = []
        cursor = dict.fromkeys(lines, 0)
        share = self.shares.share

        def push(team: str) -> None:
            line = lines[team]
            i = cursor[team]
            decided = self.decided
            while i < len(line) and line[i].id in decided:
                i += 1
            cursor[team] = i
            if i < len(line):
                head = line[i]
                heapq.heappush(heap, (share(team), head.submitted_at, head.id, team))

        for team in lines:
            push(team)
        while heap:
            team = heapq.heappop(heap)[3]
            job = lines[team][cursor[team]]
            cursor[team] += 1
            if not self._visit(job, starving=False, nominal_only=nominal_only):
                deferred.setdefault(team, []).append(job)
            push(team)
        return deferred

    # -- step 4 -------------------------------------------------------------------------------

    def _resolve(self, job: PendingJob) -> Candidates:
        k = (job.requirement, job.policy)
        c = self._resolved.get(k)
        if c is None:
            c = self._resolved[k] = resolve_candidates(
                job.requirement, job.policy, self.snap.models
            )
        return c

    def _wait(self, job: PendingJob, code: ReasonCode, **kw: object) -> None:
        w = _Waiting(job, code, self.visited, len(self.admissions))
        for k, v in kw.items():
            setattr(w, k, v)
        self.waiting.append(w)

    def _visit(self, job: PendingJob, *, starving: bool, nominal_only: bool) -> bool:
        """Decide one job; False when it was deferred to the borrowing pass."""
        if job.id in self.decided:
            return True
        if not self._evaluate(job, starving, nominal_only):
            return False
        self.decided.add(job.id)
        self.visited += 1
        return True

    def _evaluate(self, job: PendingJob, starving: bool, nominal_only: bool) -> bool:
        team = self.teams.get(job.team)
        if team is None:
            self._wait(job, ReasonCode.INVALID_JOB, detail=f"team {job.team!r} is unknown")
            return True
        g, r = job.gpus_per_replica, job.replicas
        if g < 1 or r < 1:
            self._wait(job, ReasonCode.INVALID_JOB, detail="it asks for no GPUs")
            return True
        if team.held:
            self._wait(job, ReasonCode.TEAM_HELD)
            return True
        cands = self._resolve(job)
        if not cands.matched:
            self._wait(job, ReasonCode.NO_MODEL_MATCHES, rejected=cands.rejected)
            return True
        tried = cands.matched if job.fallback else cands.matched[:1]
        need = g * r
        failures: list[_Failure] = []
        for model in tried:
            key = model.key
            pools = self.enabled.get(key)
            if not pools:
                failures.append(_Failure(SkipCode.NO_ENABLED_CLUSTER, model))
                continue
            check = self.quota.check(job.team, key, need)
            if not check.ok:
                code = SkipCode.COHORT_CANNOT_LEND if check.cohort_short else SkipCode.QUOTA_FULL
                failures.append(_Failure(code, model))
                continue
            memo_key = (key, g, r)
            if self._no_fit_memo.get(memo_key) == self.version[key]:
                best = None
            else:
                best = self._best_fit(pools, g, r, need)
                if best is None:
                    self._no_fit_memo[memo_key] = self.version[key]
            if best is None:
                failures.append(self._capacity_failure(model, g, r))
                continue
            if nominal_only and check.borrowed:
                return False  # would borrow: wait for the borrowing pass of this band
            pool, plan, leftover = best
            self._admit(job, model, pool, plan, leftover, check.borrowed, cands, failures, starving)
            return True
        skipped = cands.matched[len(tried) :]
        # Reclaim: a team within nominal takes back what borrowers hold.
        if self.config.preemption:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS and self._try_preempt(job, f.model):
                    return True
        if starving:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS and self._try_hold(job, f.model):
                    return True
        self._wait_for_capacity(job, failures, cands, skipped)
        return True

    def _best_fit(
        self, pools: Sequence[Pool], g: int, r: int, need: int
    ) -> tuple[Pool, list[int], int] | None:
        """Best fit across enabled clusters: least leftover on the nodes used, then least free
        left in the cluster, then cluster id."""
        best: tuple[Pool, list[int], int] | None = None
        best_key: tuple[int, int, str] | None = None
        for pool in pools:
            if pool.max_total < g or pool.free_total < need or not pool.fits(g, r):
                continue
            planned = pool.plan(g, r)
            if planned is None:  # pragma: no cover - fits() said yes
                continue
            plan, leftover = planned
            key = (leftover, pool.free_total - need, pool.cluster)
            if best_key is None or key < best_key:
                best, best_key = (pool, plan, leftover), key
        return best

    def _capacity_failure(self, model: GpuModel, g: int, r: int) -> _Failure:
        key = (model.key, g, r)
        ever = self._ever_memo.get(key)
        if ever is None:
            ever = self._ever_memo[key] = any(
                p.could_ever_fit(g, r) for p in self.enabled[model.key]
            )
        if not ever:
            return _Failure(SkipCode.TOO_LARGE, model)
        for pool in self.enabled[model.key]:
            holder = self._held_by.get(id(pool))
            if holder is not None and pool.fits_without_holds(g, r):
                return _Failure(SkipCode.HELD_FOR_OTHER_JOB, model, holder=holder)
        fit0 = self._fit0_memo.get(key)
        if fit0 is None:
            fit0 = self._fit0_memo[key] = any(
                _fits_counts(self.initial_counts[(p.cluster, p.model)], g, r)
                for p in self.enabled[model.key]
            )
        return _Failure(SkipCode.NO_NODE_FITS, model, fit_at_start=fit0)

    def _charge(self, team: str, model: str, need: int) -> None:
        self.quota.add(team, model, need)
        self.shares.add(team, model, need)
        self.version[model] += 1

    def _admit(
        self,
        job: PendingJob,
        model: GpuModel,
        pool: Pool,
        plan: list[int],
        leftover: int,
        borrowed: int,
        cands: Candidates,
        failures: list[_Failure],
        starving: bool,
    ) -> None:
        g = job.gpus_per_replica
        # Cluster notes before charging, so "worse fit" compares like with like.
        cluster_notes: list[ClusterNote] = []
        for other in self.enabled.get(model.key, ()):
            if other is pool:
                continue
            planned = other.plan(g, job.replicas) if other.fits(g, job.replicas) else None
            if planned is None:
                cluster_notes.append(
                    ClusterNote(
                        cluster=other.cluster,
                        code=ClusterNoteCode.NO_ROOM,
                        message=reasons.note(
                            other.cluster, reasons.msg_cluster_no_room(other.max_block())
                        ),
                    )
                )
            else:
                cluster_notes.append(
                    ClusterNote(
                        cluster=other.cluster,
                        code=ClusterNoteCode.WORSE_FIT,
                        message=reasons.note(
                            other.cluster,
                            reasons.msg_cluster_worse_fit(
                                planned[1],
                                other.free_total - job.gpus,
                                leftover,
                                pool.free_total - job.gpus,
                            ),
                        ),
                    )
                )
        for other in self.unavailable.get(model.key, ()):
            code = (
                ClusterNoteCode.DRAINING
                if other.state is ClusterState.DRAINING
                else ClusterNoteCode.DISABLED
            )
            cluster_notes.append(
                ClusterNote(
                    cluster=other.cluster,
                    code=code,
                    message=reasons.note(other.cluster, reasons.msg_cluster_state(other.state)),
                )
            )
        for i in plan:
            pool.take(i, g)
        row = self.quota.row(job.team, model.key)
        used_before = row.used
        self._charge(job.team, model.key, job.gpus)
        skipped = list(cands.rejected)
        skipped.extend(self._note(f, job) for f in failures)
        chosen_at = cands.matched.index(model)
        for later in cands.matched[chosen_at + 1 :]:
            skip = SkipCode.NOT_TRIED if job.fallback else SkipCode.FALLBACK_NOT_ALLOWED
            detail = (
                reasons.detail_not_tried()
                if job.fallback
                else reasons.detail_fallback_not_allowed()
            )
            skipped.append(
                CandidateNote(model=later.key, code=skip, message=reasons.note(later.label, detail))
            )
        message = reasons.msg_admitted(
            job.replicas,
            g,
            model.label,
            pool.cluster,
            chosen_at == 0,
            job.policy.value,
            leftover,
            borrowed,
            used_before + job.gpus,
            row.nominal,
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
                explanation=Explanation(
                    model=model.key,
                    cluster=pool.cluster,
                    message=message,
                    skipped=tuple(skipped),
                    clusters=tuple(cluster_notes),
                ),
                starvation_guard=starving,
            )
        )

    # -- preemption (what-if on a copy) ---------------------------------------------------------

    def _try_preempt(self, job: PendingJob, model: GpuModel) -> bool:
        """Reclaim nominal quota from borrowers so that ``job`` fits; True when it does.

        Rule: only for a job whose team stays within nominal on this model with it; victims are
        other teams' jobs on borrowed quota in one enabled cluster (jobs already being preempted
        are used first, for free); lowest priority, then most recently started first; the set is
        then minimised by dropping any victim not needed. Fewest victims wins across clusters.
        """
        g, r, need = job.gpus_per_replica, job.replicas, job.gpus
        row = self.quota.row(job.team, model.key)
        if row.used + need > row.nominal:
            return False
        memo_key = (model.key, g, r)
        if self._preempt_memo.get(memo_key) == self.version[model.key]:
            return False
        best_found: (
            tuple[tuple[int, int, int, str], Pool, list[_Victim], list[_Victim], list[int]] | None
        ) = None
        for pool in self.enabled.get(model.key, ()):
            if pool.max_total < g:
                continue
            key = (pool.cluster, model.key)
            claimed = self.claimed
            inflight = [v for v in self.inflight.get(key, ()) if v.alloc.job_id not in claimed]
            victims = [
                v
                for v in self.victims.get(key, ())
                if v.alloc.job_id not in claimed and v.alloc.team != job.team
            ]
            if not inflight and not victims:
                continue
            found = _what_if(pool, g, r, inflight, victims)
            if found is None:
                continue
            used_inflight, used_victims, plan, leftover = found
            rank = (
                len(used_victims),
                sum(v.alloc.priority for v in used_victims),
                leftover,
                pool.cluster,
            )
            if best_found is None or rank < best_found[0]:
                best_found = (rank, pool, used_inflight, used_victims, plan)
        if best_found is None:
            self._preempt_memo[memo_key] = self.version[model.key]
            return False
        _, pool, used_inflight, used_victims, plan = best_found
        # Apply: victims leave the candidate lists (they are decided), the job's share of the
        # currently free GPUs on its future nodes is reserved, its quota and share are charged.
        per_node: dict[int, int] = {}
        for i in plan:
            per_node[i] = per_node.get(i, 0) + g
        for i, gpus in sorted(per_node.items()):
            reserve = min(gpus, pool.free[i])
            if reserve:
                pool.take(i, reserve)
        used_after = row.used + need
        self._charge(job.team, model.key, need)
        for v in (*used_inflight, *used_victims):
            self.claimed.add(v.alloc.job_id)
        for v in used_victims:
            a = v.alloc
            self.preemptions.append(
                Preemption(
                    job_id=a.job_id,
                    team=a.team,
                    cluster=a.cluster,
                    model=a.model,
                    for_job=job.id,
                    for_team=job.team,
                    code=PreemptionCode.RECLAIM_NOMINAL,
                    message=reasons.msg_preempted(
                        a.team, model.label, job.id, job.team, used_after, row.nominal
                    ),
                )
            )
        detail = reasons.detail_preempting(
            len(used_victims), len(used_inflight), pool.cluster, used_after, row.nominal
        )
        self._wait(job, ReasonCode.PREEMPTING, label=model.label, detail=detail)
        return True

    # -- starvation guard -------------------------------------------------------------------------

    def _try_hold(self, job: PendingJob, model: GpuModel) -> bool:
        """Hold free GPUs for a starving job that does not fit (the starvation guard).

        On the enabled cluster where the most of its GPUs are already free, hold the free GPUs
        of the nodes it would use (most free first), so that no later job takes them and the
        job fits once the jobs still running there end.
        """
        if len(self.holds) >= self.config.max_capacity_holds:
            return False
        g, r = job.gpus_per_replica, job.replicas
        best: tuple[tuple[int, str], Pool, list[tuple[int, int]]] | None = None
        for pool in self.enabled.get(model.key, ()):
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
        if best is None:
            return False
        _, pool, picks = best
        held_nodes: list[tuple[str, int]] = []
        for i, h in picks:
            if h:
                pool.hold(i, h)
            held_nodes.append((pool.names[i], h))
        self.version[model.key] += 1
        self._held_by.setdefault(id(pool), job.id)
        hold = CapacityHold(
            job_id=job.id,
            team=job.team,
            cluster=pool.cluster,
            model=model.key,
            nodes=tuple(held_nodes),
        )
        self.holds.append(hold)
        detail = reasons.detail_holding(
            hold.gpus,
            job.gpus,
            len(held_nodes),
            pool.cluster,
            self.snap.now - job.submitted_at,
            self.config.starvation_wait,
        )
        self._wait(job, ReasonCode.HOLDING_CAPACITY, label=model.label, detail=detail)
        return True

    # -- reasons ------------------------------------------------------------------------------

    def _wait_for_capacity(
        self,
        job: PendingJob,
        failures: list[_Failure],
        cands: Candidates,
        skipped: Sequence[GpuModel],
    ) -> None:
        primary = min(failures, key=lambda f: _RANK[f.code])
        if primary.code is SkipCode.HELD_FOR_OTHER_JOB:
            code = ReasonCode.CAPACITY_HELD
        elif primary.code is SkipCode.NO_NODE_FITS:
            code = ReasonCode.WAITING_BEHIND if primary.fit_at_start else ReasonCode.NO_CAPACITY
        elif primary.code is SkipCode.COHORT_CANNOT_LEND:
            code = ReasonCode.COHORT_HAS_NOTHING_TO_LEND
        elif primary.code is SkipCode.QUOTA_FULL:
            code = ReasonCode.QUOTA_EXHAUSTED
        elif primary.code is SkipCode.NO_ENABLED_CLUSTER:
            draining = any(
                p.state is ClusterState.DRAINING
                for f in failures
                for p in self.unavailable.get(f.model.key, ())
            )
            code = ReasonCode.CLUSTER_DRAINING if draining else ReasonCode.NO_ENABLED_CLUSTER
        else:
            code = ReasonCode.JOB_TOO_LARGE
        ordered = [primary, *(f for f in failures if f is not primary)]
        self._wait(
            job,
            code,
            label=primary.model.label,
            failures=tuple(ordered),
            rejected=cands.rejected,
            skipped_fallback=tuple(skipped),
        )

    def _detail(self, f: _Failure, job: PendingJob, w: _Waiting | None = None) -> str:
        """The sentence for one candidate failure, with end-of-cycle numbers.

        Within a cycle use only grows and free capacity only shrinks, so a failure seen when the
        job was visited still holds at the end; the numbers shown are the ones users will see.
        """
        m = f.model.key
        g, r, need = job.gpus_per_replica, job.replicas, job.gpus
        if f.code is SkipCode.QUOTA_FULL:
            row = self.quota.row(job.team, m)
            return reasons.detail_quota_full(need, row.used, row.nominal, row.borrowing_limit)
        if f.code is SkipCode.COHORT_CANNOT_LEND:
            row = self.quota.row(job.team, m)
            return reasons.detail_cohort_cannot_lend(
                row.used,
                row.nominal,
                max(0, row.used + need - row.nominal),
                row.borrowing_limit,
                self.quota.can_lend(job.team, m),
            )
        if f.code is SkipCode.NO_ENABLED_CLUSTER:
            unavailable = self.unavailable.get(m, ())
            return reasons.detail_no_enabled_cluster(
                [p.cluster for p in unavailable if p.state is ClusterState.DRAINING],
                [p.cluster for p in unavailable if p.state is ClusterState.DISABLED],
            )
        if f.code is SkipCode.TOO_LARGE:
            pools = self.enabled[m]
            return reasons.detail_too_large(
                r, g, max(p.max_total for p in pools), max(p.empty_slots(g) for p in pools)
            )
        if f.code is SkipCode.HELD_FOR_OTHER_JOB:
            held = sum(p.held_total() for p in self.enabled[m])
            return reasons.detail_held_for_other(f.holder, held)
        largest, free = self._model_free(m)
        if w is not None and f.fit_at_start:
            return reasons.detail_waiting_behind(w.ahead, w.admitted_ahead)
        return reasons.detail_no_node_fits(r, g, largest, free)

    def _model_free(self, model: str) -> tuple[int, int]:
        cached = self._free_cache.get(model) if self._final else None
        if cached is None:
            pools = self.enabled.get(model, ())
            cached = (
                max((p.max_block() for p in pools), default=0),
                sum(p.free_total for p in pools),
            )
            if self._final:  # nothing changes any more: compute once per model
                self._free_cache[model] = cached
        return cached

    def _note(self, f: _Failure, job: PendingJob) -> CandidateNote:
        return CandidateNote(
            model=f.model.key,
            code=f.code,
            message=reasons.note(f.model.label, self._detail(f, job)),
        )

    # -- step 5 -------------------------------------------------------------------------------

    def _assemble(self) -> Decision:
        self._final = True
        pending: list[PendingReason] = []
        for position, w in enumerate(self.waiting, start=1):
            job = w.job
            notes: list[CandidateNote] = list(w.rejected)
            if w.code is ReasonCode.TEAM_HELD:
                message = reasons.msg_team_held(job.team)
            elif w.code is ReasonCode.INVALID_JOB:
                message = reasons.msg_invalid(w.detail)
            elif w.code is ReasonCode.NO_MODEL_MATCHES:
                message = reasons.msg_no_model_matches(
                    len(self.snap.models), [n.message for n in w.rejected]
                )
            elif w.failures:
                primary, *rest = w.failures
                detail = self._detail(primary, job, w)
                others = []
                for f in rest:
                    n = self._note(f, job)
                    notes.append(n)
                    if _RANK[f.code] <= _RANK[SkipCode.QUOTA_FULL]:
                        others.append(n.message)
                if len(others) > _MAX_OTHERS:
                    others[_MAX_OTHERS:] = [f"{len(others) - _MAX_OTHERS} more"]
                notes.insert(
                    len(w.rejected),
                    CandidateNote(
                        model=primary.model.key,
                        code=primary.code,
                        message=reasons.note(primary.model.label, detail),
                    ),
                )
                for m in w.skipped_fallback:
                    notes.append(
                        CandidateNote(
                            model=m.key,
                            code=SkipCode.FALLBACK_NOT_ALLOWED,
                            message=reasons.note(m.label, reasons.detail_fallback_not_allowed()),
                        )
                    )
                message = reasons.pending(
                    job.replicas, job.gpus_per_replica, w.label, detail, others
                )
            else:  # PREEMPTING, HOLDING_CAPACITY: detail prepared when decided
                message = reasons.pending(job.replicas, job.gpus_per_replica, w.label, w.detail, [])
            pending.append(
                PendingReason(
                    job_id=job.id,
                    team=job.team,
                    code=w.code,
                    message=message,
                    position=position,
                    candidates=tuple(notes),
                )
            )
        position_from = len(pending) + 1
        backlog: dict[str, int] = {}
        for b in self.snap.backlog:
            backlog[b.team] = backlog.get(b.team, 0) + max(0, b.count)
        not_considered = [
            NotConsidered(
                team=team,
                job_ids=self.beyond.get(team, ()),
                unloaded=backlog.get(team, 0),
                position_from=position_from,
                message=reasons.msg_not_considered(
                    self.config.lookback_per_team, position_from, backlog.get(team, 0)
                ),
            )
            for team in sorted(set(self.beyond) | {t for t, n in backlog.items() if n})
        ]
        shares = []
        for team in sorted(self.teams):
            alloc, dominant = self.shares.allocation_share(team)
            shares.append(
                TeamShare(
                    team=team,
                    weight=self.teams[team].weight,
                    dominant_model=dominant,
                    allocation_share=alloc,
                    usage_share=self.shares.usage_share(team),
                    share_before=self.share_before[team],
                    share_after=self.shares.share(team),
                )
            )
        return Decision(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            pending=tuple(pending),
            holds=tuple(self.holds),
            not_considered=tuple(not_considered),
            shares=tuple(shares),
            considered=self.visited,
        )


def _line_key(job: PendingJob) -> tuple[int, datetime, str]:
    return (-job.priority, job.submitted_at, job.id)


def _fits_counts(counts: list[int], g: int, r: int) -> bool:
    slots = 0
    for f in range(len(counts) - 1, g - 1, -1):
        if counts[f]:
            slots += counts[f] * (f // g)
            if slots >= r:
                return True
    return False


def _what_if(
    pool: Pool, g: int, r: int, inflight: list[_Victim], victims: list[_Victim]
) -> tuple[list[_Victim], list[_Victim], list[int], int] | None:
    """Find victims whose release lets the gang fit in ``pool``, on a copy of its free GPUs.

    Greedy in order (in-flight preemptions first, then victims by priority and recency), then
    minimised: each chosen victim whose release is not needed is dropped again.
    """
    released: dict[int, int] = {}
    base = pool.free
    total = pool.total

    def eff(i: int) -> int:
        return min(total[i], base[i] + released.get(i, 0))

    slots = 0
    for f in range(g, len(pool.buckets)):
        slots += len(pool.buckets[f]) * (f // g)

    def apply(v: _Victim, sign: int) -> int:
        delta = 0
        gv = v.alloc.gpus_per_replica
        for i in v.nodes:
            before = eff(i) // g
            released[i] = released.get(i, 0) + sign * gv
            delta += eff(i) // g - before
        return delta

    chosen: list[_Victim] = []
    for v in (*inflight, *victims):
        if slots >= r:
            break
        slots += apply(v, 1)
        chosen.append(v)
    if slots < r:
        return None
    for v in reversed(chosen):
        after = slots + apply(v, -1)
        if after >= r:
            slots = after
            chosen.remove(v)
        else:
            apply(v, 1)
    free = {i: f for i, f in enumerate(base) if f >= g}
    for i in released:
        free[i] = eff(i)
    placed = fits_free(free, g, r)
    if placed is None:  # pragma: no cover - slots said it fits
        return None
    plan, leftover = placed
    inflight_ids = {id(v) for v in inflight}
    return (
        [v for v in chosen if id(v) in inflight_ids],
        [v for v in chosen if id(v) not in inflight_ids],
        plan,
        leftover,
    )
