"""When each queued job would start: a forward simulation of the engine over expected runtimes.

:func:`forecast` replays :func:`rules.engine.decide` through time from one snapshot. At each
step the engine decides as it would in a real cycle (priority, fair share, quota, borrowing,
reclaim by preemption, gangs, the starvation guard); what it admits starts then and runs for
its expected duration; then time jumps to the next expected end of a running job, its GPUs come
back, and the engine decides again. No new arrivals are assumed. A job's estimate is the
simulated instant it was admitted, with the model and cluster it got.

Expected durations come from :class:`DurationModel`: the median runtime of finished jobs of the
same team, kind and name/image pattern, falling back to wider groups, always bounded by the
job's max runtime; each carries its basis in words so an estimate can say what it rests on.

:func:`alternatives` runs the same simulation once per candidate model (and with fewer
replicas) for one job or an unsubmitted spec, stopping as soon as that job starts.

Pure (standard library and the engine only): the cycle feeds it the snapshot it just decided on.
"""

from __future__ import annotations

import heapq
import math
import re
import statistics
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rules.engine.candidates import Candidates, resolve_candidates
from rules.engine.capacity import Pool
from rules.engine.core import DEFAULT_CONFIG, Placement, _line_order, decide
from rules.engine.decision import Decision, PendingReason
from rules.engine.fairshare import ShareBook
from rules.engine.quota import COHORT_SHORT, QuotaBook
from rules.engine.reasons import count, fmt_wait
from rules.engine.snapshot import (
    Cluster,
    ClusterState,
    EngineConfig,
    PendingJob,
    Policy,
    RunningAllocation,
    Snapshot,
    running_allocation,
)

MIN_RUNS = 3
"""Fewer finished runs than this say nothing about the next one's length."""

PREEMPTING_END = timedelta(minutes=1)
"""A job already being preempted gives its GPUs back about this soon (its grace period)."""

PREEMPTED = "the grace period of a job preempted to reclaim its GPUs"

MAY_MOVE = (
    "an estimate, not a promise: sooner if jobs ahead end early or are cancelled, later if "
    "they run longer, a team within its nominal quota reclaims GPUs, or higher-priority work "
    "arrives"
)


# -- expected durations -----------------------------------------------------------------------


_DIGITS = re.compile(r"\d+")


def name_pattern(name: str, image: str) -> str:
    """What makes two jobs "the same job again": the name with runs of digits folded
    (``bert-ft-0042`` and ``bert-ft-0043`` match) and the image without its tag or digest."""
    repo = image.split("@", 1)[0]
    slash = repo.rfind("/")
    colon = repo.rfind(":")
    if colon > slash:
        repo = repo[:colon]
    return f"{_DIGITS.sub('#', name.strip().lower())}|{repo}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """A finished run: what a later job of the same team, kind and pattern may last."""

    team: str
    kind: str
    pattern: str
    """:func:`name_pattern` of the job."""
    runtime: timedelta
    shape: str = ""
    """:func:`shape_of` the job (replicas x GPUs), for the pool-wide level."""


def shape_of(replicas: int, gpus_per_replica: int) -> str:
    """``2x8``: what makes two jobs of any team alike at the widest level."""
    return f"{replicas}x{gpus_per_replica}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Duration:
    """A job's expected runtime, the range it most likely falls in, and the basis it was
    learned from, in words."""

    expected: timedelta
    basis: str
    """E.g. ``"median of 12 runs of this team's training jobs like it"`` or ``"no finished
    runs to learn from: anywhere up to its max runtime"``."""
    low: timedelta | None = None
    """The short end of the runtime's likely range (None: ``expected``)."""
    high: timedelta | None = None
    """The long end (None: ``expected``); a running job past it has outlived what was
    learned."""
    runs: int = 0
    """Finished runs of the narrowest group it rests on (0: nothing learned)."""

    @property
    def learned(self) -> bool:
        return self.runs > 0


SHRINK = 3.0
"""Pseudo-runs of the wider group a narrower group's median is weighed with: 1 run of a job
like it moves the estimate a quarter of the way, 12 runs 80 %."""

SPREAD_Z = 1.0
"""Half-width of a runtime's likely range in standard deviations of its log (the middle 68 %
of a log-normal): a start waits on several runs, so its range, which carries the soonest and
the latest of each, holds more than one run's would. Tuned with ``bench/estimate_bench.py``
for 80-95 % of starts inside the shown range (1.28, the middle 80 % of one run, held 96 %)."""

MIN_SIGMA = 0.25
"""The least spread a runtime is given (runs of one job vary at least this much in log)."""

NO_HISTORY_FLOOR = timedelta(minutes=5)
"""With nothing learned, a runtime is anywhere between this and the job's max runtime."""


@dataclass(frozen=True, slots=True)
class _Stats:
    runs: int
    centre: float
    """Median of the log runtimes."""
    var: float
    """Variance of the log runtimes (0 for one run)."""


def _stats(logs: list[float]) -> _Stats:
    return _Stats(
        len(logs), statistics.median(logs), statistics.variance(logs) if len(logs) > 1 else 0.0
    )


class DurationModel:
    """Runtimes learned from finished jobs, most specific first and shrinking toward the wider
    prior: the same name pattern and image of the team, the team's jobs of that kind, the
    pool's jobs of that shape (replicas x GPUs), every job of the pool.

    Each level's median (in log) is weighed with the wider level's as if that were
    :data:`SHRINK` runs, and so is its spread: two runs of a job like it move the estimate,
    they do not replace what 40 runs of the team say. With no finished run at all, nothing
    is learned: the range is wide (:data:`NO_HISTORY_FLOOR` to the max runtime) and the basis
    says so. Always bounded by the job's max runtime: the portal stops a job there.
    """

    def __init__(self, finished: Sequence[Finished], *, min_runs: int = MIN_RUNS) -> None:
        self.min_runs = min_runs
        groups: dict[tuple[str, ...], list[float]] = {}
        for f in finished:
            log = math.log(max(1.0, f.runtime.total_seconds()))
            for key in (
                ("pattern", f.team, f.kind, f.pattern),
                ("team", f.team, f.kind),
                ("shape", f.shape),
                ("pool",),
            ):
                groups.setdefault(key, []).append(log)
        self.stats = {key: _stats(logs) for key, logs in groups.items()}
        self._memo: dict[tuple[str, str, str, str, timedelta], Duration] = {}

    def expected(
        self, *, team: str, kind: str, pattern: str, max_runtime: timedelta, shape: str = ""
    ) -> Duration:
        """The expected runtime of a job and its likely range, with its basis."""
        key = (team, kind, pattern, shape, max_runtime)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._expected(team, kind, pattern, max_runtime, shape)
        return found

    def _expected(
        self, team: str, kind: str, pattern: str, max_runtime: timedelta, shape: str
    ) -> Duration:
        cap = max(1.0, max_runtime.total_seconds())
        levels = (
            (("pool",), "jobs of the pool"),
            (("shape", shape), f"the pool's {shape.replace('x', ' x ')}-GPU jobs"),
            (("team", team, kind), f"this team's {kind} jobs"),
            (("pattern", team, kind, pattern), f"this team's {kind} jobs like it (same name "
             "and image)"),
        )  # fmt: skip
        centre = var = 0.0
        runs, who, wider = 0, "", ""
        for level_key, words in levels:
            st = self.stats.get(level_key)
            if st is None or (level_key[0] == "shape" and not shape):
                continue
            if runs == 0:
                centre, var = st.centre, st.var if st.runs > 1 else MIN_SIGMA**2
            else:
                centre = (st.runs * st.centre + SHRINK * centre) / (st.runs + SHRINK)
                if st.runs > 1:
                    var = ((st.runs - 1) * st.var + SHRINK * var) / (st.runs - 1 + SHRINK)
            if who:
                wider = who
            runs, who = st.runs, words
        if runs == 0:
            floor = min(NO_HISTORY_FLOOR.total_seconds(), cap)
            return Duration(
                expected=timedelta(seconds=math.sqrt(floor * cap)),
                low=timedelta(seconds=floor),
                high=max_runtime,
                runs=0,
                basis=f"no finished runs to learn from yet: anywhere up to its max runtime "
                f"({fmt_wait(max_runtime)})",
            )
        sigma = max(MIN_SIGMA, math.sqrt(var))
        expected = min(cap, math.exp(centre))
        low = min(expected, math.exp(centre - SPREAD_Z * sigma))
        high = min(cap, max(expected, math.exp(centre + SPREAD_Z * sigma)))
        basis = f"median of {count(runs, 'finished run')} of {who}"
        if wider and runs < 4 * SHRINK:
            basis += f", weighed with {wider}"
        if expected >= cap:
            basis = f"its max runtime ({basis} is longer)"
        return Duration(
            expected=timedelta(seconds=expected),
            low=timedelta(seconds=low),
            high=timedelta(seconds=high),
            runs=runs,
            basis=basis,
        )


# -- the simulation ---------------------------------------------------------------------------


_ANY = 1 << 62
"""More GPUs than any job asks."""


class _Step(Placement):
    """One simulated step: ``decide()`` over the jobs that could do anything in it, less the
    wording of every pending job's reason.

    - Unworded: a simulated step needs only what starts and what is preempted, and the words
      were about 40 % of a step over a deep queue. Only the jobs left at the end get their
      reason, from one full ``decide``. (``forecast(worded=True)`` runs the plain ``decide``
      at every step; the tests compare both.)
    - Quota-bound jobs dropped: once the lines are cut (lookback, starvation heads), a job
      that is not a starving head and whose team's quota cannot take it on any model it may
      try is left out. Quota use only grows within a cycle, so such a job would fail on quota
      wherever it came in the order, and a quota failure changes nothing (no GPUs taken, no
      preemption, no hold: those need a fit or a starving head). Dropping it leaves every
      other job's turn as it was (the fill order is by share, which it does not move), so
      the admissions and preemptions are the plain engine's. In a deep queue most jobs are
      such (their team is at its quota and the cohort has nothing to lend).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        config: EngineConfig,
        asks: Mapping[str, tuple[int, int]],
        wants: Sequence[tuple[str, tuple[str, ...]]],
        sim: _Sim,
    ) -> None:
        self.sim = sim
        """The simulation the step decides in: its pools and books are read from there
        rather than made again from the snapshot."""
        self._charged: list[tuple[str, str, int]] = []
        """What this step charged on the simulation's books (for :meth:`give_back`)."""
        super().__init__(snapshot, config)
        self.memos.resolved = sim.resolved  # the models never change: resolve once per forecast
        self.asks = asks
        """Job id -> (what it wants: an index into ``wants``, the GPUs it asks), from
        :func:`_quota_asks`."""
        self.wants = wants
        """(team, the models its jobs may try), for the quota check of many jobs at once."""

    def _index_pools(self) -> dict[str, int]:
        return self.sim.free.step_pools(self)

    def _team_line(self, jobs: list[PendingJob]) -> list[PendingJob]:
        # The simulation keeps its pending jobs in line order (_in_lines) but for the jobs
        # that come back after a preemption.
        return _line_order(jobs) if jobs[0].team in self.sim.requeued_teams else jobs

    def _books(self, capacity: dict[str, int]) -> tuple[QuotaBook, ShareBook, int]:
        return self.sim.quota, self.sim.shares, self.sim.preempting

    def charge(self, team: str, model: str, need: int) -> None:
        self._charged.append((team, model, need))
        super().charge(team, model, need)

    def give_back(self) -> None:
        """Take back from the simulation's books what this step charged and held on them:
        the next step starts from the running jobs alone, as a cycle does."""
        quota, shares = self.quota, self.shares
        for team, model, gpus in self._charged:
            quota.add(team, model, -gpus)
            shares.add(team, model, -gpus)
        for hold in self.holds:
            if hold.cohort_gpus:
                quota.hold(hold.team, hold.model, -hold.cohort_gpus)

    def _running_of(self, model: str) -> list[tuple[str, list[RunningAllocation]]]:
        return [(team, list(jobs.values())) for team, jobs in self.sim.on.get(model, {}).items()]

    worded = False

    def _lines(self) -> None:
        super()._lines()
        self._version = 0
        self._per_model: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._bounds: dict[int, tuple[int, int, int]] = {}
        self._drop_quota_bound()

    def _drop_quota_bound(self) -> None:
        """Leave out of every line the jobs whose quota fails on every model they may try
        (what :meth:`_next_in_line` would pass over, in one tighter loop: most jobs of a deep
        queue are such)."""
        starving = self.starving
        bounds = self._bounds
        bounds_of = self._bounds_of
        asks = self.asks
        for band in self.bands.values():
            for team, line in band.items():
                kept = []
                for job in line:
                    ask = asks.get(job.id)
                    if ask is None:
                        kept.append(job)  # unknown to the grouping: the engine decides it
                        continue
                    want, need = ask
                    b = bounds.get(want)
                    if b is None:
                        b = bounds[want] = bounds_of(want, False)
                    if need <= b[1] or job.id in starving:
                        kept.append(job)
                if len(kept) != len(line):
                    band[team] = kept

    def _bounds_of(self, want: int, fresh: bool) -> tuple[int, int, int]:
        """The most GPUs a job of ``wants[want]`` can ask and fit its quota on one of the
        models it may try, within nominal and borrowing too, and the cycle's version they were
        read at (``QuotaBook.most`` is exact for any size). Quota use only grows within a
        cycle, so numbers read earlier are upper bounds: a job above them fails now too, and
        they are read again (``fresh``) only before a job is let through."""
        team, models = self.wants[want]
        version = self._version
        per_model = self._per_model
        quota = self.quota
        room = reach = -_ANY  # no enabled cluster has any of the models: nothing fits
        oldest = version
        for m in models:
            key = (team, m)
            e = per_model.get(key)
            if e is None or (fresh and e[2] != version):
                row = quota.row(team, m)
                e = per_model[key] = (row.nominal - row.used, quota.most(team, m), version)
            if e[0] > room:
                room = e[0]
            if e[1] > reach:
                reach = e[1]
            if e[2] < oldest:
                oldest = e[2]
        return room, reach, oldest

    def _starving_inert(self, job: PendingJob, want: int, need: int) -> bool:
        """Whether a starving job can do nothing now on any model it may try: its team's own
        borrowing limit blocks it, or the gang could never fit there, or the cohort cannot
        lend enough and no hold is left to take (one per model, ``max_capacity_holds`` in
        all). Such a job is admitted nowhere, reclaims nothing and holds nothing, and quota
        use and holds only grow within a cycle."""
        team, models = self.wants[want]
        g, r = job.gpus_per_replica, job.replicas
        quota = self.quota
        holds_left = len(self.holds) < self.config.max_capacity_holds
        held = self.memos.held_models
        for m in models:
            fits = quota.fits(team, m, need)
            may_act = fits >= 0 or (fits == COHORT_SHORT and holds_left and m not in held)
            if may_act and self._ever_fits(m, g, r):
                return False
        return True

    def _next_in_line(
        self,
        team: str,
        line: list[PendingJob],
        i: int,
        nominal_only: bool,
        deferred: dict[str, list[PendingJob]],
    ) -> int:
        """Pass over the jobs that cannot act in this cycle: those whose quota now fails on
        every model they may try (no admission, no reclaim, and no hold: a starving job is
        passed over only when :meth:`_starving_inert`), and, in the nominal pass, those that
        would have to borrow (each would be deferred to the borrowing pass or fail there
        alike, as reclaiming needs nominal room), which go to ``deferred`` in line order.
        Quota use only grows within a cycle, so a job passed over would have failed or been
        deferred the same way when its turn came, and its turn changes nothing else: the fill
        order is by share."""
        # Every admission and reclaim is charged, every hold held: what moves quota or room.
        self._version = version = len(self._charged) + len(self.holds)
        bounds = self._bounds
        asks = self.asks
        starving = self.starving
        n = len(line)
        later: list[PendingJob] | None = None
        while i < n:
            job = line[i]
            ask = asks.get(job.id)
            if ask is None:
                break
            want, need = ask
            if job.id in starving:
                if self._starving_inert(job, want, need):
                    i += 1
                    continue
                break
            b = bounds.get(want)
            if b is None:
                b = bounds[want] = self._bounds_of(want, False)
            if need <= b[1] and (need <= b[0] or not nominal_only) and b[2] != version:
                # About to be let through: read the bounds again.
                b = bounds[want] = self._bounds_of(want, True)
            if need <= b[1]:
                if need <= b[0]:
                    break
                if not nominal_only:
                    # It has to borrow, so it can act only by being admitted (a reclaim needs
                    # nominal room): pass it over when every model it may try has no room for
                    # its gang any more (capacity only shrinks within a cycle) or no quota for
                    # it (``_bounds_of`` just read every model's bound afresh).
                    g, r = job.gpus_per_replica, job.replicas
                    cap_failed = self.memos.cap_failed
                    per_model = self._per_model
                    wteam, models = self.wants[want]
                    for m in models:
                        if (m, g, r) not in cap_failed and need <= per_model[(wteam, m)][1]:
                            return i
                    i += 1
                    continue
                if later is None:
                    later = deferred.setdefault(team, [])
                later.append(job)
            i += 1
        return i

    def _assemble(self) -> Decision:
        return Decision(admissions=tuple(self.admissions), preemptions=tuple(self.preemptions))


def _quota_asks(
    snapshot: Snapshot, jobs: Sequence[PendingJob], enabled: Container[str]
) -> tuple[dict[str, tuple[int, int]], list[tuple[str, tuple[str, ...]]]]:
    """Each job's quota ask for :class:`_Step`: (index of its team and the models it may try
    in enabled clusters in the list returned, GPUs). Invalid jobs (no GPUs, unknown or held
    team, no model matches) are left out: the engine words them itself."""
    teams = {t.id: t for t in snapshot.teams}
    resolved: dict[tuple[object, ...], tuple[str, ...] | None] = {}
    index: dict[tuple[str, tuple[str, ...]], int] = {}
    asks: dict[str, tuple[int, int]] = {}
    for job in jobs:
        team = teams.get(job.team)
        if team is None or team.held or job.gpus_per_replica < 1 or job.replicas < 1:
            continue
        rkey = (job.requirement, job.policy, job.fallback)
        if rkey not in resolved:
            matched = resolve_candidates(job.requirement, job.policy, snapshot.models).matched
            tried = matched if job.fallback else matched[:1]
            resolved[rkey] = tuple(m.key for m in tried if m.key in enabled) if tried else None
        models = resolved[rkey]
        if models is None:
            continue
        want = index.setdefault((job.team, models), len(index))
        asks[job.id] = (want, job.gpus_per_replica * job.replicas)
    return asks, list(index)


@dataclass(frozen=True, slots=True, kw_only=True)
class Expected:
    """When a running job is expected to give its GPUs back, and why."""

    end: datetime
    basis: str
    earliest: datetime | None = None
    """The soonest it likely ends (None: ``end``)."""
    latest: datetime | None = None
    """The latest it likely ends (None: ``end``)."""
    runs: int = 0
    """Finished runs its runtime was learned from."""
    outlived: bool = False
    """It has run past what was learned: nobody knows when it ends (up to its max runtime)."""


OUTLIVED_SHARE = 0.5
"""A running job past the long end of what was learned is, most likely, still running after
half as long again as it has run (long jobs tend to run longer): its point estimate, within a
range that reaches its max runtime."""


def running_expected(
    *, started: datetime, duration: Duration, max_runtime: timedelta, now: datetime
) -> Expected:
    """When a job running since ``started`` ends, from its learned ``duration``.

    - Not yet at its expected runtime: at it, likely within the learned range.
    - Past it, within the range: any time between now and the long end (most likely within
      the first third of that), not "soon".
    - Past the long end of the range (and short of its max runtime): it has outlived what was
      learned; when it ends is unknown up to its max runtime (``outlived``).
    """
    cap = started + max_runtime
    end = started + duration.expected
    late = min(cap, started + (duration.high or duration.expected))
    if late <= now < cap:
        point = min(cap, now + max(timedelta(minutes=1), (now - started) * OUTLIVED_SHARE))
        return Expected(
            end=point,
            earliest=now,
            latest=cap,
            runs=duration.runs,
            outlived=True,
            basis=f"{duration.basis}, which it has outlived: it may end any time up to its max "
            f"runtime ({cap:%Y-%m-%d %H:%M} UTC)",
        )
    if end <= now:
        point = min(late, now + max(timedelta(minutes=1), (late - now) / 3))
        return Expected(
            end=max(now, point),
            earliest=now,
            latest=max(now, late),
            runs=duration.runs,
            basis=f"{duration.basis}, which it has run past: likely by {late:%Y-%m-%d %H:%M} UTC",
        )
    early = started + (duration.low or duration.expected)
    return Expected(
        end=end,
        earliest=max(now, min(early, end)),
        latest=max(end, late),
        runs=duration.runs,
        basis=duration.basis,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Forecast:
    """Every queued job's estimate, and what the simulation cost."""

    jobs: Mapping[str, JobForecast]
    steps: int
    """``decide`` calls made."""
    simulated_until: datetime


@dataclass(slots=True)
class _Sim:
    """The mutable state of one simulation (kept apart from the frozen inputs)."""

    free: _Free
    running: dict[str, tuple[RunningAllocation, datetime, str]]
    ends: list[tuple[datetime, str]]
    pending: dict[str, PendingJob]
    quota: QuotaBook
    shares: ShareBook
    """The books as the next step starts from them (``Placement._books``), charged as jobs
    start and stop instead of summed again over every running job. A step charges them
    further as it decides and gives that back when it is done (:meth:`_Step.give_back`)."""
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
    """``Placement._resolved`` shared by every step."""
    on: dict[str, dict[str, dict[str, RunningAllocation]]] = field(default_factory=dict)
    """Model -> team -> job id -> its running allocation on the model: what a step's reclaim
    reads (``Placement._running_of``)."""

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


class _Free:
    """Every node's free GPUs as the simulation has them, kept from step to step in the two
    forms a decision reads, each brought up to date only where GPUs moved since it was last
    read (a step starts and ends a few jobs; the pool has thousands of nodes):

    - the engine's pools, which an unworded step copies instead of indexing the nodes again
      (a copy shares the node names, index and totals; only the free counts are new);
    - the snapshot's clusters with replaced nodes, for a worded ``decide``.
    """

    def __init__(self, snapshot: Snapshot, config: EngineConfig) -> None:
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
        index = Placement(snapshot, config)
        self.capacity = index._index_pools()
        self.pools = index.pools
        self.pool_of_node = index._pool_of_node
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

    def step_pools(self, pl: Placement) -> dict[str, int]:
        """Give ``pl`` copies of the pools as they are now (``Placement._index_pools``)."""
        moved: dict[tuple[str, str, str], dict[int, int]] = {}
        for key in self.moved_slots:
            f = self.free[key]
            for pool, i in self.slots.get(key, ()):
                moved.setdefault(pool.key, {})[i] = f
        self.moved_slots.clear()
        for key, free in moved.items():
            self.pools[key].reset_free(free)
        pl.pools = {key: pool.copy() for key, pool in self.pools.items()}
        pl._pool_of_node = self.pool_of_node
        pl.enabled = {m: [pl.pools[k] for k in keys] for m, keys in self.enabled.items()}
        pl.unavailable = {m: [pl.pools[k] for k in keys] for m, keys in self.unavailable.items()}
        return self.capacity

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


def _started(
    sim: _Sim,
    decision: Decision,
    now: datetime,
    durations: Mapping[str, Duration],
    default: Duration,
    opened: _Opened,
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


def _in_lines(jobs: Iterable[PendingJob]) -> dict[str, PendingJob]:
    """Pending jobs by id, team by team and each team's in line order, as a step reads them
    (``_Step._team_line``): a step then need not check the order of every line again."""
    by_team: dict[str, list[PendingJob]] = {}
    for job in jobs:
        by_team.setdefault(job.team, []).append(job)
    return {job.id: job for line in by_team.values() for job in _line_order(line)}


@dataclass(frozen=True)
class _Freed:
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
class _Opened:
    """Why the jobs a step starts start then: at once, or once the running jobs it ended
    gave their GPUs back (or a borrowed job's protection ran out)."""

    now: datetime
    start: datetime
    freed: tuple[_Freed, ...] = ()
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


def _unstarted(
    job: PendingJob, sim: _Sim, stopped: str, now: datetime, last: datetime
) -> JobForecast:
    reason = sim.reasons.get(job.id)
    said = f": {reason.message}" if reason is not None and reason.message else ""
    if stopped == "stuck":
        why = f"no estimate: even after every running job has ended it would not start{said}"
    elif stopped == "horizon":
        why = (
            f"no estimate within the next {fmt_wait(last - now)}: the jobs ahead of it and the "
            f"running ones keep its GPUs at least that long{said}"
        )
    else:
        why = (
            f"no estimate: the simulation stopped at {last:%Y-%m-%d %H:%M} UTC (its step "
            f"budget) before this job's turn{said}"
        )
    return JobForecast(job_id=job.id, start=None, why=why)


def forecast(
    snapshot: Snapshot,
    config: EngineConfig = DEFAULT_CONFIG,
    *,
    ends: Mapping[str, Expected],
    durations: Mapping[str, Duration],
    default: Duration,
    horizon: timedelta = timedelta(days=7),
    quantum: timedelta = timedelta(minutes=1),
    max_steps: int = 400,
    resolution: float = 0.05,
    first: Decision | None = None,
    until: str | None = None,
    worded: bool = False,
    rules: PreemptionRules = NO_RULES,
) -> Forecast:
    """Estimate when each job of ``snapshot.pending`` starts, by replaying the engine.

    ``ends``: per running job, when it is expected to end (a job missing here ends at
    ``started_at + default``); ``durations``: per pending job, how long it runs once started.
    Ends closer together than ``quantum``, or than ``resolution`` times the time simulated so
    far, are one step (an estimate is no finer than that).
    ``first``: the decision already made on ``snapshot`` (the cycle's), reused for step one.
    ``until``: stop as soon as this job starts (what :func:`alternatives` needs).
    ``rules``: the minimum runtime of the jobs it starts and the grace period of those it
    preempts (a job queued now that it starts and then preempts keeps the estimate of its
    first start, and goes back in line for the jobs behind it).
    Stops when every job started, when nothing runs and nothing more can start, past
    ``horizon`` or after ``max_steps`` decisions; jobs left say which.
    """
    now = snapshot.now
    free = _Free(snapshot, config)
    # Books with no job running yet: each running job is charged as the simulation starts it.
    quota, shares, _ = Placement(replace(snapshot, running=()), config)._books(free.capacity)
    sim = _Sim(
        free=free,
        running={},
        ends=[],
        pending=_in_lines(snapshot.pending),
        quota=quota,
        shares=shares,
    )
    for a in snapshot.running:
        exp = ends.get(a.job_id)
        if a.preempting:
            end, basis = now + rules.release_after(a.team), "grace period (it is being preempted)"
            sim.spread[a.job_id] = (end, end, 0, False)
        elif exp is not None:
            end, basis = max(exp.end, now), exp.basis
            sim.spread[a.job_id] = (
                max(now, min(end, exp.earliest or end)),
                max(end, exp.latest or end),
                exp.runs,
                exp.outlived,
            )
        else:
            end, basis = max(a.started_at + default.expected, now), default.basis
            sim.spread[a.job_id] = (
                max(now, min(end, a.started_at + (default.low or default.expected))),
                max(end, a.started_at + (default.high or default.expected)),
                default.runs,
                False,
            )
        sim.run(a, end, basis)
        sim.ends.append((end, a.job_id))
        if a.protected_until is not None and now < a.protected_until < end:
            sim.wakes.append(a.protected_until)
    heapq.heapify(sim.ends)
    heapq.heapify(sim.wakes)
    sim.requeue = dict(sim.pending)
    asks = _quota_asks(snapshot, snapshot.pending, sim.free.enabled)
    t = now
    steps = 0
    stopped = "done"
    opened = _Opened(now, now)
    while sim.pending:
        if first is not None and steps == 0:
            decision = first
        elif worded:
            decision = decide(_state(snapshot, sim, t), config)
        else:
            state = _state(snapshot, sim, t, whole=False)
            step = _Step(state, config, *asks, sim)
            decision = step.run()
            step.give_back()
        steps += 1
        _started(sim, decision, t, durations, default, opened, rules)
        sim.reasons.update((r.job_id, r) for r in decision.pending)
        if until is not None and until in sim.done:
            break
        for p in decision.preemptions:
            sim.preempt(p.job_id, t + rules.release_after(p.team))
        if not sim.pending:
            break
        if steps >= max_steps:
            stopped = "budget"
            break
        # Ends within one quantum are one step; far ahead, a step spans ``resolution`` of the
        # distance from now (an estimate 10 h out is no finer than 30 min anyway).
        freed, at = _advance(sim, max(quantum, (t - now) * resolution))
        if at is None:
            stopped = "stuck"
            break
        t = max(t, at)
        if t - now > horizon:
            stopped = "horizon"
            break
        opened = _Opened(now, t, tuple(freed))
    jobs = dict(sim.done)
    if sim.pending and not worded:  # why the jobs left wait: one worded decision
        last = decide(_state(snapshot, sim, t), config)
        sim.reasons.update((r.job_id, r) for r in last.pending)
    for job in sim.pending.values():
        if job.id not in jobs:  # one back in line after a preemption keeps its first start
            jobs[job.id] = _unstarted(job, sim, stopped, now, t)
    return Forecast(jobs=jobs, steps=steps, simulated_until=t)


def _state(snapshot: Snapshot, sim: _Sim, t: datetime, *, whole: bool = True) -> Snapshot:
    """The snapshot as the simulation has the pool at ``t``. Not ``whole``: the clusters
    and running jobs are left as the first snapshot has them, for a :class:`_Step`, which
    reads both from ``sim`` instead."""
    if not whole:
        return replace(snapshot, now=t, pending=tuple(sim.pending.values()))
    return replace(
        snapshot,
        now=t,
        clusters=sim.free.now(),
        running=tuple(a for a, _, _ in sim.running.values()),
        pending=tuple(sim.pending.values()),
    )


def _advance(sim: _Sim, quantum: timedelta) -> tuple[list[_Freed], datetime | None]:
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
    freed: list[_Freed] = []
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
        freed.append(_Freed(job_id, held[0].team, end, held[2], early, late, runs, outlived))
        at = max(at, end)
    return freed, at


# -- alternatives -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """What the job would get if it asked differently: one model only, or fewer replicas."""

    label: str
    """E.g. ``"A100-80GB"`` or ``"4 replicas instead of 8"``."""
    model: str
    """The model asked for ('' when any candidate is fine: the replicas variant)."""
    replicas: int
    estimate: JobForecast


def alternatives(
    snapshot: Snapshot,
    job: PendingJob,
    config: EngineConfig = DEFAULT_CONFIG,
    *,
    ends: Mapping[str, Expected],
    durations: Mapping[str, Duration],
    default: Duration,
    horizon: timedelta = timedelta(days=7),
    quantum: timedelta = timedelta(minutes=1),
    max_steps: int = 400,
    rules: PreemptionRules = NO_RULES,
) -> list[Alternative]:
    """The estimate for ``job`` (queued or not yet submitted) on each candidate model its
    requirement allows that some enabled cluster has (a model no cluster offers is no way to
    start, only a simulation to run), and with half and a quarter of its replicas (a gang of
    fewer pods fits sooner). Each variant replaces the job in line, keeping its submit time;
    the simulation stops when the variant starts."""
    variants: list[tuple[str, str, PendingJob]] = []
    present = {
        n.model for c in snapshot.clusters if c.state is ClusterState.ENABLED for n in c.nodes
    }
    models = [
        m
        for m in resolve_candidates(job.requirement, job.policy, snapshot.models).matched
        if m.key in present
    ]
    for m in models:
        only = replace(job.requirement, models=(m.key,))
        variants.append(
            (m.label, m.key, replace(job, requirement=only, policy=Policy.ORDERED, fallback=False))
        )
    r = job.replicas // 2
    while r >= 1 and len(variants) < len(models) + 2:
        variants.append(
            (f"{count(r, 'replica')} instead of {job.replicas}", "", replace(job, replicas=r))
        )
        r //= 2
    others = tuple(p for p in snapshot.pending if p.id != job.id)
    out: list[Alternative] = []
    for label, model, variant in variants:
        result = forecast(
            replace(snapshot, pending=(*others, variant)),
            config,
            ends=ends,
            durations=durations,
            default=default,
            horizon=horizon,
            quantum=quantum,
            max_steps=max_steps,
            until=job.id,
            rules=rules,
        )
        out.append(
            Alternative(
                label=label, model=model, replicas=variant.replicas, estimate=result.jobs[job.id]
            )
        )
    return out
