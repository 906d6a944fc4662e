"""One simulated step of a forecast: the engine's decision over the jobs that could act in it,
unworded (see :func:`decide_step`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from rules.engine.candidates import resolve_candidates
from rules.engine.core import Inputs, Placement
from rules.engine.decision import Decision
from rules.engine.fit import ever_fits
from rules.engine.index import Books
from rules.engine.lines import line_order
from rules.engine.quota import COHORT_SHORT
from rules.engine.simulation import Sim
from rules.engine.snapshot import (
    EngineConfig,
    PendingJob,
    RunningAllocation,
    Snapshot,
)

_ANY = 1 << 62
"""More GPUs than any job asks."""


def decide_step(
    snapshot: Snapshot,
    config: EngineConfig,
    asks: Mapping[str, tuple[int, int]],
    wants: Sequence[tuple[str, tuple[str, ...]]],
    sim: Sim,
) -> Decision:
    """One simulated step: ``decide()`` over the jobs that could do anything in it, less the
    wording of every pending job's reason, on the simulation's pools and books.

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
    step = Placement(snapshot, config, _inputs(sim, asks, wants))
    decision = step.run()
    _give_back(step)
    return decision


def _inputs(
    sim: Sim, asks: Mapping[str, tuple[int, int]], wants: Sequence[tuple[str, tuple[str, ...]]]
) -> Inputs:
    """The simulation's pools and books, instead of made again from the snapshot."""
    requeued = sim.requeued_teams

    def sorted_if_requeued(jobs: list[PendingJob]) -> list[PendingJob]:
        # The simulation keeps its pending jobs in line order (in_lines) but for the jobs
        # that come back after a preemption.
        return line_order(jobs) if jobs[0].team in requeued else jobs

    def running_of(model: str) -> list[tuple[str, list[RunningAllocation]]]:
        return [(team, list(jobs.values())) for team, jobs in sim.on.get(model, {}).items()]

    return Inputs(
        pools=sim.free.step_pools(),
        books=Books(sim.quota, sim.shares, sim.preempting),
        running_of=running_of,
        line_order=sorted_if_requeued,
        resolved=sim.resolved,  # the models never change: resolve once per forecast
        skip=lambda pl: QuotaSkip(pl, asks, wants),
    )


def _give_back(pl: Placement) -> None:
    """Take back from the simulation's books what a step charged and held on them: the next
    step starts from the running jobs alone, as a cycle does."""
    quota, shares = pl.quota, pl.shares
    for team, model, gpus in pl.charged:
        quota.add(team, model, -gpus)
        shares.add(team, model, -gpus)
    for hold in pl.holds:
        if hold.cohort_gpus:
            quota.hold(hold.team, hold.model, -hold.cohort_gpus)


class QuotaSkip:
    """The jobs a step passes over: those whose quota fails on every model they may try (see
    :func:`decide_step`), read through the step's placement (a :class:`Skip`)."""

    def __init__(
        self,
        pl: Placement,
        asks: Mapping[str, tuple[int, int]],
        wants: Sequence[tuple[str, tuple[str, ...]]],
    ) -> None:
        self.pl = pl
        self.asks = asks
        """Job id -> (what it wants: an index into ``wants``, the GPUs it asks), from
        :func:`quota_asks`."""
        self.wants = wants
        """(team, the models its jobs may try), for the quota check of many jobs at once."""
        self._version = 0
        self._per_model: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._bounds: dict[int, tuple[int, int, int]] = {}

    def prune(self) -> None:
        """Leave out of every line the jobs whose quota fails on every model they may try
        (what :meth:`next_in_line` would pass over, in one tighter loop: most jobs of a deep
        queue are such)."""
        starving = self.pl.starving
        bounds = self._bounds
        bounds_of = self._bounds_of
        asks = self.asks
        for band in self.pl.bands.values():
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
        quota = self.pl.quota
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
        quota = self.pl.quota
        holds_left = len(self.pl.holds) < self.pl.config.max_capacity_holds
        held = self.pl.memos.held_models
        for m in models:
            fits = quota.fits(team, m, need)
            may_act = fits >= 0 or (fits == COHORT_SHORT and holds_left and m not in held)
            if may_act and ever_fits(self.pl, m, g, r):
                return False
        return True

    def next_in_line(
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
        self._version = version = len(self.pl.charged) + len(self.pl.holds)
        bounds = self._bounds
        asks = self.asks
        starving = self.pl.starving
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
                    cap_failed = self.pl.memos.cap_failed
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


def quota_asks(
    snapshot: Snapshot, jobs: Sequence[PendingJob], enabled: Container[str]
) -> tuple[dict[str, tuple[int, int]], list[tuple[str, tuple[str, ...]]]]:
    """Each job's quota ask for :class:`QuotaSkip`: (index of its team and the models it may try
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
