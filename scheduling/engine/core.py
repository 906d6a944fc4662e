"""One scheduling decision over a snapshot: ``decide(snapshot) -> Decision``.

The steps, in order (each is one method of :class:`_Cycle`):

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
from bisect import bisect_right
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby
from operator import attrgetter
from typing import TypeVar

from scheduling.engine import reasons
from scheduling.engine.candidates import Candidates, resolve_candidates
from scheduling.engine.capacity import Pool
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
    pending_reason,
)
from scheduling.engine.fairshare import ShareBook
from scheduling.engine.quota import COHORT_SHORT, QuotaBook
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
_RANK_QUOTA = _RANK[SkipCode.QUOTA_FULL]  # candidates blocked by quota or capacity are counted
# The reason a primary candidate failure gives, where it depends on nothing else.
_REASON_OF = {
    SkipCode.HELD_FOR_OTHER_JOB: ReasonCode.CAPACITY_HELD,
    SkipCode.COHORT_CANNOT_LEND: ReasonCode.COHORT_HAS_NOTHING_TO_LEND,
    SkipCode.QUOTA_FULL: ReasonCode.QUOTA_EXHAUSTED,
}


def decide(snapshot: Snapshot, config: EngineConfig = DEFAULT_CONFIG) -> Decision:
    """Decide admissions, preemptions and pending reasons for one cycle.

    Pure: the result depends only on ``snapshot`` and ``config`` (equal inputs give an equal
    Decision, whatever the order of the input tuples); nothing is read from the clock or the
    environment, nothing is mutated.
    """
    return _Cycle(snapshot, config).run()


class _Failure:
    """Why one candidate model did not take the job. Shared between jobs (see the memos);
    quota failures are resolved to QUOTA_FULL or COHORT_CANNOT_LEND when assembled."""

    __slots__ = ("code", "fit_at_start", "holder", "model", "notes")

    def __init__(
        self, code: SkipCode, model: GpuModel, fit_at_start: bool = False, holder: str = ""
    ) -> None:
        self.code = code
        self.model = model
        self.fit_at_start = fit_at_start
        self.holder = holder
        # Once the cycle is final: GPUs needed -> (its note, the note's rank in _RANK).
        self.notes: dict[int, tuple[CandidateNote, int]] = {}


class _Waiting:
    """A job left pending for a reason decided and worded when it was visited (held team,
    invalid, no model, preempting, holding capacity)."""

    __slots__ = ("admitted_ahead", "ahead", "code", "detail", "job", "label", "rejected")

    def __init__(
        self,
        job: PendingJob,
        code: ReasonCode,
        ahead: int,
        admitted_ahead: int,
        label: str = "",
        detail: str = "",
        rejected: tuple[CandidateNote, ...] = (),
    ) -> None:
        self.job = job
        self.code = code
        self.ahead = ahead
        self.admitted_ahead = admitted_ahead
        self.label = label
        self.detail = detail
        self.rejected = rejected


_Words = tuple[ReasonCode, str, tuple[CandidateNote, ...], str, str]
"""A blocked job's reason: code, message (empty for WAITING_BEHIND), candidate notes, and the
frame its message has around the detail."""

_Signature = tuple[str, int, int, int, int]
"""(team, id(candidates), candidates tried, GPUs per replica, replicas): jobs with equal
signatures are decided alike, so the memos are per signature."""

_Blocked = tuple[PendingJob, "tuple[_Failure, ...]", Candidates, int, int, int]
"""A job blocked by quota or capacity: (job, failures, candidates, candidates tried, jobs ahead,
admitted ahead). A tuple because it is made once per pending job: tens of thousands a cycle."""


class _Victim:
    """A running allocation that could be preempted, with its node indices in its pool."""

    __slots__ = ("alloc", "nodes", "sort_key")

    def __init__(self, alloc: RunningAllocation, nodes: list[int]) -> None:
        self.alloc = alloc
        self.nodes = nodes
        # Lowest priority first, then most recently started, then id (deterministic).
        self.sort_key = (alloc.priority, -alloc.started_at.timestamp(), alloc.job_id)


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Forgetful(dict[_K, _V]):
    """A memo that remembers nothing (``_Cycle.memos = False``)."""

    def __setitem__(self, key: _K, value: _V) -> None:
        pass


class _Cycle:
    memos = True
    """False words every pending reason afresh instead of sharing the words of an equal job
    (the reason memo): the straightforward path the tests compare the memoised one with. The
    signature memos stay: they decide when a job is looked at (see :meth:`_evaluate`)."""

    def __init__(self, snapshot: Snapshot, config: EngineConfig) -> None:
        self.snap = snapshot
        self.config = config
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        # A wait is a _Waiting (worded on the spot) or, on the hot path, a _Blocked tuple.
        self.waiting: list[_Waiting | _Blocked] = []
        self.holds: list[CapacityHold] = []
        self.visited = 0
        self.claimed: set[str] = set()  # running jobs preempted (or waited for) this cycle
        self._resolved: dict[tuple[object, ...], Candidates] = {}
        self._quota_failed: dict[tuple[str, str], tuple[int, _Failure]] = {}
        self._cap_failed: dict[tuple[str, int, int], _Failure] = {}
        self._failed_sig: dict[_Signature, tuple[_Failure, ...]] = {}
        self._deferred_sig: set[_Signature] = set()
        self._no_cluster: dict[str, _Failure] = {}
        self._preempt_failed: set[tuple[str, int, int]] = set()
        self._fit0_memo: dict[tuple[str, int, int], bool] = {}
        self._ever_memo: dict[tuple[str, int, int], bool] = {}
        self._held_by: dict[int, str] = {}  # id(pool) -> first holder's job id
        self._quota_held_by: dict[tuple[str, str], str] = {}  # (cohort, model) -> holder
        self._held_models: set[str] = set()  # one hold per model and cycle
        self._final = False
        self._cluster_note_memo: dict[object, ClusterNote] = {}
        self._free_cache: dict[str, tuple[int, int, int]] = {}
        self._fallback_memo: dict[str, CandidateNote] = {}
        self._not_tried_memo: dict[str, CandidateNote] = {}

    # -- step 1 -------------------------------------------------------------------------------

    def _index(self) -> None:
        snap = self.snap
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
        self.initial_counts = {
            key: [len(b) for b in pool.buckets] for key, pool in self.pools.items()
        }
        team_cohort = {t.id: t.cohort for t in snap.teams}
        self.quota = QuotaBook(team_cohort, snap.quotas, snap.cohort_quotas)
        usage: dict[str, float] = {}
        for u in snap.usage:
            usage[u.team] = usage.get(u.team, 0.0) + max(0.0, u.weighted_gpu_hours)
        self.shares = ShareBook(
            capacity,
            {m.key: m.cost_factor for m in snap.models},
            {t.id: t.weight for t in snap.teams},
            usage,
            self.config.usage_half_life,
            self.config.usage_weight,
        )
        # Charged once per (team, model), not per job: both books only add up, and a cycle
        # sees thousands of running jobs for a few hundred pairs.
        by_team_model: dict[tuple[str, str], list[RunningAllocation]] = {}
        charged: dict[tuple[str, str], int] = {}
        for a in snap.running:
            key = (a.team, a.model)
            charged[key] = charged.get(key, 0) + a.replicas * a.gpus_per_replica
            allocs = by_team_model.get(key)
            if allocs is None:
                by_team_model[key] = [a]
            else:
                allocs.append(a)
        for (team, model), gpus in charged.items():
            self.quota.add(team, model, gpus)
            self.shares.add(team, model, gpus)
        self.quota.start()
        # Which running jobs are on borrowed quota: count each team's jobs on a model in start
        # order; a job any of whose GPUs lies above nominal is borrowed (the newest are).
        self.victims: dict[tuple[str, str], list[_Victim]] = {}
        self.inflight: dict[tuple[str, str], list[_Victim]] = {}
        for (team, model), allocs in by_team_model.items():
            nominal = self.quota.row(team, model).nominal
            allocs.sort(key=lambda a: (a.started_at, a.job_id))
            cumulative = 0
            for a in allocs:
                cumulative += a.replicas * a.gpus_per_replica
                home = self.pools.get((a.cluster, model))
                if home is None or home.state is not ClusterState.ENABLED or not a.nodes:
                    continue
                if a.preempting:
                    nodes = [home.index[n] for n in a.nodes if n in home.index]
                    self.inflight.setdefault((a.cluster, model), []).append(_Victim(a, nodes))
                elif cumulative > nominal:
                    nodes = [home.index[n] for n in a.nodes if n in home.index]
                    self.victims.setdefault((a.cluster, model), []).append(_Victim(a, nodes))
        for lst in (*self.victims.values(), *self.inflight.values()):
            lst.sort(key=lambda v: v.sort_key)
        self.share_before = {t: self.shares.share(t) for t in self.teams}

    # -- step 2 -------------------------------------------------------------------------------

    def _lines(self) -> None:
        lookback = max(0, self.config.lookback_per_team)
        grouped: dict[str, list[PendingJob]] = {}
        # Runs of one team (the whole team when the input is in line order) in one C call.
        for team, run in groupby(self.snap.pending, key=_team):
            line = grouped.get(team)
            if line is None:
                grouped[team] = list(run)
            else:
                line.extend(run)
        # bands[priority][team] = that team's considered jobs of that priority, in line order.
        self.bands: dict[int, dict[str, list[PendingJob]]] = {}
        self.beyond: dict[str, tuple[str, ...]] = {}
        self.starving: set[str] = set()
        guard = self.config.starvation_wait
        now = self.snap.now
        considered = 0
        ids: set[str] = set()
        for team in sorted(grouped):
            jobs = _line_order(grouped[team])
            if len(jobs) > lookback:
                self.beyond[team] = tuple(j.id for j in jobs[lookback:])
                del jobs[lookback:]
            n = len(jobs)
            considered += n
            ids.update(map(_job_id, jobs))
            start = 0
            while start < n:  # cut into priority bands: the line is sorted by priority first
                head = jobs[start]
                end = bisect_right(jobs, -head.priority, start, key=_minus_priority)
                band = self.bands.get(head.priority)
                if band is None:
                    band = self.bands[head.priority] = {}
                band[team] = jobs[start:end]
                # The head of the team's line in this band: the starvation guard's subject.
                if now - head.submitted_at >= guard:
                    self.starving.add(head.id)
                start = end
        # Job ids are unique in any sane snapshot; only when they are not does a job whose id
        # was already decided need skipping (a set lookup per job, so only then).
        self.duplicates = considered != len(ids)
        self.decided: set[str] = set()

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
        failed = self._failed_sig
        deferred_sig = self._deferred_sig
        resolved = self._resolved
        candidates = self._candidates
        wait = self.waiting.append
        admissions = self.admissions
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
                job = line[i]
                req = job.requirement
                policy = job.policy
                cands = resolved.get(
                    (req.models, req.min_memory_gib, req.min_tflops_fp16, req.bf16, req.fp8, policy)
                ) or candidates(req, policy)
                n_tried = len(cands.matched) if job.fallback else 1
                signature = (team, id(cands), n_tried, job.gpus_per_replica, job.replicas)
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

    def _wait(
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
            _Waiting(
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
        signature: _Signature,
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
            self._wait(job, ReasonCode.INVALID_JOB, detail=f"team {team_id!r} is unknown")
            return True
        g, r = job.gpus_per_replica, job.replicas
        if g < 1 or r < 1:
            self._wait(job, ReasonCode.INVALID_JOB, detail="it asks for no GPUs")
            return True
        if team.held:
            self._wait(job, ReasonCode.TEAM_HELD)
            return True
        if not cands.matched:
            self._wait(job, ReasonCode.NO_MODEL_MATCHES, rejected=cands.rejected)
            return True
        tried = cands.matched[:n_tried]
        need = g * r
        failures: list[_Failure] = []
        enabled = self.enabled
        quota_failed = self._quota_failed
        cap_failed = self._cap_failed
        for model in tried:
            key = model.key
            pools = enabled.get(key)
            if not pools:
                f = self._no_cluster.get(key)
                if f is None:
                    f = self._no_cluster[key] = _Failure(SkipCode.NO_ENABLED_CLUSTER, model)
                failures.append(f)
                continue
            qkey = (team_id, key)
            qf = quota_failed.get(qkey)
            if qf is not None and need >= qf[0]:
                failures.append(qf[1])
                continue
            borrowed = self.quota.fits(team_id, key, need)
            if borrowed < 0:
                f = qf[1] if qf is not None else _Failure(SkipCode.QUOTA_FULL, model)
                quota_failed[qkey] = (need, f)
                failures.append(f)
                continue
            ckey = (key, g, r)
            cf = cap_failed.get(ckey)
            if cf is not None:
                failures.append(cf)
                continue
            if nominal_only and borrowed:
                if any(p.free_total >= need and p.fits(g, r) for p in pools):
                    self._deferred_sig.add(signature)
                    return False  # would borrow: wait for the borrowing pass of this band
                cf = cap_failed[ckey] = self._capacity_failure(model, g, r)
                failures.append(cf)
                continue
            fitting = self._fitting(pools, g, r, need)
            if not fitting:
                cf = cap_failed[ckey] = self._capacity_failure(model, g, r)
                failures.append(cf)
                continue
            self._admit(job, model, fitting, borrowed, cands, failures, starving)
            return True
        # Reclaim: a team within nominal takes back what borrowers hold.
        if self.config.preemption:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS and self._try_preempt(job, f.model):
                    return True
        if starving:
            for f in failures:
                if f.code is SkipCode.NO_NODE_FITS:
                    if self._try_hold(job, f.model, quota_short=False):
                        return True
                elif (
                    f.code is SkipCode.QUOTA_FULL
                    and self.quota.fits(team_id, f.model.key, need) == COHORT_SHORT
                    and self._try_hold(job, f.model, quota_short=True)
                ):
                    return True
        known = tuple(failures)
        if not starving:
            self._failed_sig[signature] = known
        self.waiting.append((job, known, cands, n_tried, self.visited, len(self.admissions)))
        return True

    def _candidates(self, req: Requirement, policy: Policy) -> Candidates:
        """resolve_candidates, memoised per cycle by value (a plain tuple key: hashing and
        comparing the frozen dataclass itself runs Python code per lookup)."""
        key = (req.models, req.min_memory_gib, req.min_tflops_fp16, req.bf16, req.fp8, policy)
        cands = self._resolved.get(key)
        if cands is None:
            cands = self._resolved[key] = resolve_candidates(req, policy, self.snap.models)
        return cands

    def _fitting(
        self, pools: Sequence[Pool], g: int, r: int, need: int
    ) -> list[tuple[tuple[int, int, str], Pool, list[int]]]:
        """Every enabled cluster the gang fits, best fit first: least leftover on the nodes
        used, then least free left in the cluster, then cluster id."""
        out: list[tuple[tuple[int, int, str], Pool, list[int]]] = []
        for pool in pools:
            if pool.max_total < g or pool.free_total < need or not pool.fits(g, r):
                continue
            planned = pool.plan(g, r)
            if planned is None:  # pragma: no cover - fits() said yes
                continue
            plan, leftover = planned
            out.append(((leftover, pool.free_total - need, pool.cluster), pool, plan))
        out.sort(key=lambda c: c[0])
        return out

    def _capacity_failure(self, model: GpuModel, g: int, r: int) -> _Failure:
        key = (model.key, g, r)
        pools = self.enabled[model.key]
        ever = self._ever_memo.get(key)
        if ever is None:
            ever = self._ever_memo[key] = any(p.could_ever_fit(g, r) for p in pools)
        if not ever:
            return _Failure(SkipCode.TOO_LARGE, model)
        if self._held_by:
            for pool in pools:
                holder = self._held_by.get(id(pool))
                if holder is not None and pool.fits_without_holds(g, r):
                    return _Failure(SkipCode.HELD_FOR_OTHER_JOB, model, holder=holder)
        fit0 = self._fit0_memo.get(key)
        if fit0 is None:
            fit0 = self._fit0_memo[key] = any(
                _fits_counts(self.initial_counts[(p.cluster, p.model)], g, r) for p in pools
            )
        return _Failure(SkipCode.NO_NODE_FITS, model, fit_at_start=fit0)

    def _charge(self, team: str, model: str, need: int) -> None:
        self.quota.add(team, model, need)
        self.shares.add(team, model, need)

    def _admit(
        self,
        job: PendingJob,
        model: GpuModel,
        fitting: list[tuple[tuple[int, int, str], Pool, list[int]]],
        borrowed: int,
        cands: Candidates,
        failures: list[_Failure],
        starving: bool,
    ) -> None:
        g = job.gpus_per_replica
        (leftover, _, _), pool, plan = fitting[0]
        cluster_notes = self._cluster_notes(model, fitting)
        for i in plan:
            pool.take(i, g)
        row = self.quota.row(job.team, model.key)
        self._charge(job.team, model.key, job.gpus)
        skipped = list(cands.rejected)
        skipped.extend(self._note(f, job) for f in failures)
        chosen_at = cands.matched.index(model)
        for later in cands.matched[chosen_at + 1 :]:
            skipped.append(
                self._not_tried_note(later) if job.fallback else self._fallback_note(later)
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
            row.used,
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

    def _cluster_notes(
        self, model: GpuModel, fitting: list[tuple[tuple[int, int, str], Pool, list[int]]]
    ) -> list[ClusterNote]:
        """Why the other clusters with this model lost (computed before charging)."""
        (leftover, cluster_left, _), pool, _ = fitting[0]
        notes: list[ClusterNote] = []
        memo = self._cluster_note_memo
        others = {id(p): rank for rank, p, _ in fitting[1:]}
        for other in self.enabled.get(model.key, ()):
            if other is pool:
                continue
            rank = others.get(id(other))
            # Notes are equal for equal numbers: made once per cycle, then shared.
            if rank is None:
                key: tuple[object, ...] = (other.cluster, other.max_block())
            else:
                key = (other.cluster, rank[0], rank[1], leftover, cluster_left)
            note = memo.get(key)
            if note is None:
                if rank is None:
                    code = ClusterNoteCode.NO_ROOM
                    detail = reasons.msg_cluster_no_room(other.max_block())
                else:
                    code = ClusterNoteCode.WORSE_FIT
                    detail = reasons.msg_cluster_worse_fit(rank[0], rank[1], leftover, cluster_left)
                note = memo[key] = ClusterNote(
                    cluster=other.cluster, code=code, message=reasons.note(other.cluster, detail)
                )
            notes.append(note)
        for other in self.unavailable.get(model.key, ()):
            note = memo.get(other.cluster)
            if note is None:
                code = (
                    ClusterNoteCode.DRAINING
                    if other.state is ClusterState.DRAINING
                    else ClusterNoteCode.DISABLED
                )
                note = memo[other.cluster] = ClusterNote(
                    cluster=other.cluster,
                    code=code,
                    message=reasons.note(other.cluster, reasons.msg_cluster_state(other.state)),
                )
            notes.append(note)
        return notes

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
        if memo_key in self._preempt_failed:
            return False
        # Rank across clusters: fewest victims, lowest sum of their priorities, least leftover
        # on the nodes used, cluster id. The placement (for the leftover) is worked out only
        # for the clusters tied on the first two.
        found: list[tuple[tuple[int, int], Pool, list[_Victim], list[_Victim], dict[int, int]]] = []
        for pool in self.enabled.get(model.key, ()):
            if pool.max_total < g:
                continue
            key = (pool.cluster, model.key)
            inflight = self.inflight.get(key, [])
            # No own-team job can be a victim: a team within nominal with this job has none
            # above nominal on this model (borrowed flags count from the cycle's start).
            victims = self.victims.get(key, [])
            if not inflight and not victims:
                continue
            chosen = _what_if(pool, g, r, inflight, victims)
            if chosen is not None:
                used_inflight, used_victims, released = chosen
                rank = (len(used_victims), sum(v.alloc.priority for v in used_victims))
                found.append((rank, pool, used_inflight, used_victims, released))
        best: tuple[tuple[int, str], Pool, list[_Victim], list[_Victim], list[int]] | None = None
        if found:
            least = min(f[0] for f in found)
            for rank, pool, used_inflight, used_victims, released in found:
                if rank != least:
                    continue
                placed = _plan_released(pool, released, g, r)
                if placed is None:  # pragma: no cover - the slot count said it fits
                    continue
                plan, leftover = placed
                tie = (leftover, pool.cluster)
                if best is None or tie < best[0]:
                    best = (tie, pool, used_inflight, used_victims, plan)
        if best is None:
            self._preempt_failed.add(memo_key)
            return False
        _, pool, used_inflight, used_victims, plan = best
        # Apply: victims leave the candidate lists, the job's share of the currently free GPUs
        # on its future nodes is reserved, and its quota and share are charged.
        per_node: dict[int, int] = {}
        for i in plan:
            per_node[i] = per_node.get(i, 0) + g
        for i, gpus in sorted(per_node.items()):
            reserve = min(gpus, pool.free[i])
            if reserve:
                pool.take(i, reserve)
        key = (pool.cluster, model.key)
        for v in used_inflight:
            self.inflight[key].remove(v)
            self.claimed.add(v.alloc.job_id)
        for v in used_victims:
            self.victims[key].remove(v)
            self.claimed.add(v.alloc.job_id)
        self._charge(job.team, model.key, need)
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
                        a.team, model.label, job.id, job.team, row.used, row.nominal
                    ),
                )
            )
        detail = reasons.detail_preempting(
            len(used_victims), len(used_inflight), pool.cluster, row.used, row.nominal
        )
        self._wait(job, ReasonCode.PREEMPTING, label=model.label, detail=detail)
        return True

    # -- starvation guard -------------------------------------------------------------------------

    def _try_hold(self, job: PendingJob, model: GpuModel, *, quota_short: bool) -> bool:
        """Hold what a starving job lacks on ``model`` (the starvation guard); True when held.

        Capacity: on the enabled cluster where the most of its GPUs are already free, the free
        GPUs of the nodes it would use (most free first) are held, so that no later job takes
        them and the job fits once the jobs still running there end. Quota: when the cohort
        cannot lend enough (``quota_short``), what it can lend now is held for the job, so that
        later borrowers do not take it; jobs within their own nominal quota are not affected.
        """
        if len(self.holds) >= self.config.max_capacity_holds or model.key in self._held_models:
            return False
        g, r = job.gpus_per_replica, job.replicas
        pools = self.enabled.get(model.key, ())
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
        cohort_gpus = max(0, self.quota.can_lend(job.team, model.key)) if quota_short else 0
        if cohort_gpus:
            self.quota.hold(job.team, model.key, cohort_gpus)
            self._quota_held_by.setdefault(
                (self.quota.row(job.team, model.key).cohort, model.key), job.id
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
            self._held_by.setdefault(id(pool), job.id)
        # A failure may now be "held for another job": classify afresh.
        self._cap_failed = {k: f for k, f in self._cap_failed.items() if k[0] != model.key}
        self._failed_sig.clear()
        self._held_models.add(model.key)
        hold = CapacityHold(
            job_id=job.id,
            team=job.team,
            cluster=cluster,
            model=model.key,
            nodes=tuple(held_nodes),
            cohort_gpus=cohort_gpus,
        )
        self.holds.append(hold)
        detail = reasons.detail_holding(
            hold.gpus,
            job.gpus,
            len(held_nodes),
            cluster,
            cohort_gpus,
            self.snap.now - job.submitted_at,
            self.config.starvation_wait,
        )
        self._wait(job, ReasonCode.HOLDING_CAPACITY, label=model.label, detail=detail)
        return True

    # -- step 5: reasons ------------------------------------------------------------------------

    def _quota_code(self, team: str, model: str, need: int) -> SkipCode:
        outcome = self.quota.fits(team, model, need)
        if outcome != COHORT_SHORT:
            return SkipCode.QUOTA_FULL
        if self.quota.held(team, model) and self.quota.fits_ignoring_holds(team, model, need):
            return SkipCode.HELD_FOR_OTHER_JOB
        return SkipCode.COHORT_CANNOT_LEND

    def _code(self, f: _Failure, job: PendingJob) -> SkipCode:
        if f.code is SkipCode.QUOTA_FULL:
            return self._quota_code(job.team, f.model.key, job.gpus)
        return f.code

    def _detail(self, code: SkipCode, f: _Failure, job: PendingJob) -> str:
        """The sentence for one candidate failure, with end-of-cycle numbers (see the module
        docstring for why those explain a failure seen earlier in the cycle)."""
        m = f.model.key
        g, r, need = job.gpus_per_replica, job.replicas, job.gpus
        if code is SkipCode.QUOTA_FULL:
            row = self.quota.row(job.team, m)
            return reasons.detail_quota_full(need, row.used, row.nominal, row.borrowing_limit)
        if code is SkipCode.COHORT_CANNOT_LEND:
            row = self.quota.row(job.team, m)
            return reasons.detail_cohort_cannot_lend(
                row.used,
                row.nominal,
                max(0, row.used + need - row.nominal),
                row.borrowing_limit,
                self.quota.can_lend(job.team, m),
            )
        if code is SkipCode.NO_ENABLED_CLUSTER:
            unavailable = self.unavailable.get(m, ())
            return reasons.detail_no_enabled_cluster(
                [p.cluster for p in unavailable if p.state is ClusterState.DRAINING],
                [p.cluster for p in unavailable if p.state is ClusterState.DISABLED],
            )
        if code is SkipCode.TOO_LARGE:
            pools = self.enabled[m]
            return reasons.detail_too_large(
                r, g, max(p.max_total for p in pools), max(p.empty_slots(g) for p in pools)
            )
        if code is SkipCode.HELD_FOR_OTHER_JOB:
            if f.code is SkipCode.QUOTA_FULL:  # the cohort's lending is held
                cohort = self.quota.row(job.team, m).cohort
                holder = self._quota_held_by.get((cohort, m), "")
                return reasons.detail_held_for_other(holder, self.quota.held(job.team, m))
            held = sum(p.held_total() for p in self.enabled[m])
            return reasons.detail_held_for_other(f.holder, held)
        largest, free, out_of_service = self._model_free(m)
        return reasons.detail_no_node_fits(r, g, largest, free, out_of_service)

    def _model_free(self, model: str) -> tuple[int, int, int]:
        """(largest free block, free GPUs, GPUs on nodes out of service) in enabled clusters."""
        cached = self._free_cache.get(model) if self._final else None
        if cached is None:
            pools = self.enabled.get(model, ())
            cached = (
                max((p.max_block() for p in pools), default=0),
                sum(p.free_total for p in pools),
                sum(p.out_of_service for p in pools),
            )
            if self._final:  # nothing changes any more: compute once per model
                self._free_cache[model] = cached
        return cached

    def _note(self, f: _Failure, job: PendingJob) -> CandidateNote:
        """The note for one failure, with the numbers as they are now."""
        code = self._code(f, job)
        return CandidateNote(
            model=f.model.key,
            code=code,
            message=reasons.note(f.model.label, self._detail(code, f, job)),
        )

    def _final_note(self, f: _Failure, job: PendingJob) -> tuple[CandidateNote, int]:
        """The note for one failure once the cycle is final, and its rank; shared between jobs.

        A quota failure object belongs to one (team, model), a capacity failure to one
        (model, gang shape), so (failure, GPUs needed) identifies the words."""
        note = self._note(f, job)
        f.notes[job.gpus] = entry = (note, _RANK[note.code])
        return entry

    def _pending_reason(self, w: _Waiting, position: int) -> PendingReason:
        """A wait decided and worded when the job was visited."""
        job = w.job
        if w.code is ReasonCode.TEAM_HELD:
            message = reasons.msg_team_held(job.team)
        elif w.code is ReasonCode.INVALID_JOB:
            message = reasons.msg_invalid(w.detail)
        elif w.code is ReasonCode.NO_MODEL_MATCHES:
            message = reasons.msg_no_model_matches(
                len(self.snap.models), [n.message for n in w.rejected]
            )
        else:  # PREEMPTING, HOLDING_CAPACITY
            message = reasons.pending(job.replicas, job.gpus_per_replica, w.label, w.detail)
        return PendingReason(
            job_id=job.id,
            team=job.team,
            code=w.code,
            message=message,
            position=position,
            candidates=w.rejected,
        )

    def _reason_words(
        self, job: PendingJob, failures: tuple[_Failure, ...], cands: Candidates, n_tried: int
    ) -> tuple[ReasonCode, str, tuple[CandidateNote, ...], str, str]:
        """Code, message, candidate notes and the message's frame of a capacity/quota wait.

        Jobs of one group share one failures tuple (the group memo), hence the same words:
        they are assembled once per tuple. WAITING_BEHIND differs per job only in its counts:
        its message is left empty and the frame (what goes before and after the detail) is
        returned instead."""
        need = job.gpus_per_replica * job.replicas
        final_note = self._final_note
        if len(failures) == 1:
            f = failures[0]
            primary, best = f.notes.get(need) or final_note(f, job)
            notes = [primary]
            primary_at = others = 0
        else:
            entries = [f.notes.get(need) or final_note(f, job) for f in failures]
            ranks = [rank for _, rank in entries]
            notes = [note for note, _ in entries]
            best = min(ranks)
            primary_at = ranks.index(best)
            primary = notes[primary_at]
            others = sum(1 for rank in ranks if rank <= _RANK_QUOTA) - (best <= _RANK_QUOTA)
            if primary_at:
                notes.insert(0, notes.pop(primary_at))
        f = failures[primary_at]
        code = _REASON_OF.get(primary.code) or self._reason_code(primary.code, f, failures)
        label = f.model.label
        frame_key = (job.replicas, job.gpus_per_replica, label, others)
        frame = self._frames.get(frame_key)
        if frame is None:
            frame = self._frames[frame_key] = reasons.pending_frame(*frame_key)
        head, tail = frame
        message = ""
        if code is not ReasonCode.WAITING_BEHIND:
            message = f"{head}{primary.message[len(label) + 2 :]}{tail}"
        if n_tried < len(cands.matched):
            notes.extend(self._fallback_note(m) for m in cands.matched[n_tried:])
        rejected = cands.rejected
        return code, message, (*rejected, *notes) if rejected else tuple(notes), head, tail

    def _reason_code(
        self, primary: SkipCode, f: _Failure, failures: tuple[_Failure, ...]
    ) -> ReasonCode:
        if primary is SkipCode.HELD_FOR_OTHER_JOB:
            return ReasonCode.CAPACITY_HELD
        if primary is SkipCode.NO_NODE_FITS:
            return ReasonCode.WAITING_BEHIND if f.fit_at_start else ReasonCode.NO_CAPACITY
        if primary is SkipCode.COHORT_CANNOT_LEND:
            return ReasonCode.COHORT_HAS_NOTHING_TO_LEND
        if primary is SkipCode.QUOTA_FULL:
            return ReasonCode.QUOTA_EXHAUSTED
        if primary is SkipCode.NO_ENABLED_CLUSTER:
            draining = any(
                p.state is ClusterState.DRAINING
                for g in failures
                for p in self.unavailable.get(g.model.key, ())
            )
            return ReasonCode.CLUSTER_DRAINING if draining else ReasonCode.NO_ENABLED_CLUSTER
        return ReasonCode.JOB_TOO_LARGE

    def _not_tried_note(self, model: GpuModel) -> CandidateNote:
        note = self._not_tried_memo.get(model.key)
        if note is None:
            note = self._not_tried_memo[model.key] = CandidateNote(
                model=model.key,
                code=SkipCode.NOT_TRIED,
                message=reasons.note(model.label, reasons.detail_not_tried()),
            )
        return note

    def _fallback_note(self, model: GpuModel) -> CandidateNote:
        note = self._fallback_memo.get(model.key)
        if note is None:
            note = self._fallback_memo[model.key] = CandidateNote(
                model=model.key,
                code=SkipCode.FALLBACK_NOT_ALLOWED,
                message=reasons.note(model.label, reasons.detail_fallback_not_allowed()),
            )
        return note

    def _assemble(self) -> Decision:
        self._final = True
        self._frames: dict[tuple[int, int, str, int], tuple[str, str]] = {}
        # id(failures tuple) -> words; the tuples live in self.waiting, so their ids stay unique.
        self._reason_memo: dict[int, _Words] = {}
        # The loop below is the one place that runs once per pending job: kept flat.
        memo = self._reason_memo if self.memos else _Forgetful[int, _Words]()
        words = self._reason_words
        worded = self._pending_reason
        waiting_behind = ReasonCode.WAITING_BEHIND
        detail_waiting = reasons.detail_waiting_behind
        new = pending_reason
        pending: list[PendingReason] = []
        append = pending.append
        position = 0
        for w in self.waiting:
            position += 1
            if isinstance(w, _Waiting):
                append(worded(w, position))
                continue
            job, failures, cands, n_tried, ahead, admitted_ahead = w
            cached = memo.get(id(failures))
            if cached is None:
                cached = memo[id(failures)] = words(job, failures, cands, n_tried)
            code, message, candidates, head, tail = cached
            if code is waiting_behind:  # the one message with per-job numbers
                message = f"{head}{detail_waiting(ahead, admitted_ahead)}{tail}"
            append(new(job.id, job.team, code, message, position, candidates))
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


_by_submit = attrgetter("submitted_at", "id")
_by_priority = attrgetter("priority")
_job_id = attrgetter("id")
_team = attrgetter("team")


def _minus_priority(job: PendingJob) -> int:
    return -job.priority


def _in_line_order(jobs: list[PendingJob]) -> bool:
    """Whether ``jobs`` already are in line order (cheaper to check than to sort again)."""
    prev = jobs[0]
    for job in jobs[1:]:
        if job.priority != prev.priority:
            if job.priority > prev.priority:
                return False
        elif job.submitted_at != prev.submitted_at:
            if job.submitted_at < prev.submitted_at:
                return False
        elif job.id < prev.id:
            return False
        prev = job
    return True


def _line_order(jobs: list[PendingJob]) -> list[PendingJob]:
    """A team's line: priority desc, then submit time, then id.

    Input already in line order (the cycle's ORDER BY gives it for free) is only checked.
    Otherwise C-level sorts: by priority, then each equal-priority run by submit time and id.
    """
    if _in_line_order(jobs):
        return jobs
    jobs.sort(key=_by_priority, reverse=True)  # stable, so equal priorities keep input order
    out: list[PendingJob] = []
    start = 0
    n = len(jobs)
    while start < n:
        p = jobs[start].priority
        end = start + 1
        while end < n and jobs[end].priority == p:
            end += 1
        run = jobs[start:end]
        run.sort(key=_by_submit)
        out.extend(run)
        start = end
    return out


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
) -> tuple[list[_Victim], list[_Victim], dict[int, int]] | None:
    """Find victims whose release lets the gang fit in ``pool``, on a copy of its free GPUs:
    (in-flight preemptions used, victims chosen, node -> free GPUs once they are released).

    Greedy in order (in-flight preemptions first, then victims by priority and recency), then
    minimised: each chosen victim whose release is not needed is dropped again. Counts slots
    (replicas that fit) only; :func:`_plan_released` places the gang.
    """
    released: dict[int, int] = {}
    base = pool.free
    total = pool.total
    buckets = pool.buckets
    slots = 0
    for f in range(g, len(buckets)):
        slots += len(buckets[f]) * (f // g)
    chosen: list[_Victim] = []
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
    replica first, then node index; the pool's buckets are walked, not its nodes.
    """
    extra: dict[int, list[int]] = {}
    for i, f in released.items():
        if f >= g:
            extra.setdefault(f, []).append(i)
    buckets = pool.buckets
    remaining = r
    chosen: list[int] = []
    leftover = 0
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
            k = per_node if per_node < remaining else remaining
            chosen.extend([i] * k)
            leftover += f - k * g
            remaining -= k
            if remaining == 0:
                return chosen, leftover
    return None
