"""In-cycle quota accounting: nominal, borrowing within the cohort, lending limits.

Per (team, model): ``used`` GPUs against ``nominal`` and ``borrowing_limit``. Per (cohort,
model) the book keeps three sums so that every check is O(1):

- ``own``: the cohort's own quota (:class:`CohortQuota`);
- ``lendable``: Σ over members of ``min(lending_limit, max(0, nominal - used))``;
- ``borrowed``: Σ over members of ``max(0, used - nominal)``.

What the cohort can lend to team *t* is ``own + lendable - lendable_t - borrowed``: the idle
quota of the others, minus what is already borrowed (by anyone, *t* included). Without lending
limits this is exactly "the cohort's total use stays within its total quota".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rules.engine.snapshot import CohortQuota, Quota

OVER_LIMIT = -1
"""``QuotaBook.fits``: the team's nominal + borrowing limit would be exceeded."""
COHORT_SHORT = -2
"""``QuotaBook.fits``: the cohort cannot lend what borrowing needs."""


class QuotaRow:
    """One (team, model) quota line and its in-cycle use."""

    __slots__ = ("borrowing_limit", "cohort", "lending_limit", "nominal", "used")

    def __init__(
        self, cohort: str, nominal: int, borrowing_limit: int | None, lending_limit: int | None
    ) -> None:
        self.cohort = cohort
        self.nominal = max(0, nominal)
        self.borrowing_limit = None if borrowing_limit is None else max(0, borrowing_limit)
        self.lending_limit = None if lending_limit is None else max(0, lending_limit)
        self.used = 0

    def lendable(self) -> int:
        idle = self.nominal - self.used
        if idle <= 0:
            return 0
        if self.lending_limit is not None and self.lending_limit < idle:
            return self.lending_limit
        return idle

    def borrowed(self) -> int:
        over = self.used - self.nominal
        return over if over > 0 else 0

    def limit(self) -> int | None:
        """nominal + borrowing limit, or None when borrowing is unlimited."""
        if self.borrowing_limit is None:
            return None
        return self.nominal + self.borrowing_limit


class CohortSums:
    __slots__ = ("borrowed", "held", "lendable", "own")

    def __init__(self) -> None:
        self.own = 0
        self.lendable = 0
        self.borrowed = 0
        self.held = 0  # lending held for a starving job: no one else may borrow it


class QuotaBook:
    """Quota rows of every (team, model) and the cohort sums, updated as the cycle decides."""

    def __init__(
        self,
        team_cohort: dict[str, str],
        quotas: tuple[Quota, ...],
        cohort_quotas: tuple[CohortQuota, ...],
    ) -> None:
        self._team_cohort = team_cohort
        self._rows: dict[tuple[str, str], QuotaRow] = {}
        self._sums: dict[tuple[str, str], CohortSums] = {}
        for q in quotas:
            cohort = team_cohort.get(q.team, "default")
            row = QuotaRow(cohort, q.nominal, q.borrowing_limit, q.lending_limit)
            old = self._rows.get((q.team, q.model))
            if old is not None:  # a duplicated row: the later one wins, deterministically
                self._sums_for(cohort, q.model).lendable -= old.lendable()
            self._rows[(q.team, q.model)] = row
            self._sums_for(cohort, q.model).lendable += row.lendable()
        for cq in cohort_quotas:
            self._sums_for(cq.cohort, cq.model).own += max(0, cq.nominal)

    def _sums_for(self, cohort: str, model: str) -> CohortSums:
        s = self._sums.get((cohort, model))
        if s is None:
            s = self._sums[(cohort, model)] = CohortSums()
        return s

    def row(self, team: str, model: str) -> QuotaRow:
        r = self._rows.get((team, model))
        if r is None:
            r = QuotaRow(self._team_cohort.get(team, "default"), 0, None, None)
            self._rows[(team, model)] = r
        return r

    def can_lend(self, team: str, model: str, *, ignoring_holds: bool = False) -> int:
        """What the cohort can lend ``team`` on ``model`` now (may be negative when the
        cohort's nominal use has outgrown what was lent)."""
        r = self.row(team, model)
        s = self._sums_for(r.cohort, model)
        held = 0 if ignoring_holds else s.held
        return s.own + s.lendable - r.lendable() - s.borrowed - held

    def hold(self, team: str, model: str, gpus: int) -> None:
        """Hold ``gpus`` of the cohort's lending on ``model`` for a starving job of ``team``."""
        self._sums_for(self.row(team, model).cohort, model).held += gpus

    def held(self, team: str, model: str) -> int:
        return self._sums_for(self.row(team, model).cohort, model).held

    def fits_ignoring_holds(self, team: str, model: str, need: int) -> bool:
        r = self.row(team, model)
        after = r.used + need
        if after <= r.nominal:
            return True
        borrowed_after = after - r.nominal
        if r.borrowing_limit is not None and borrowed_after > r.borrowing_limit:
            return False
        return borrowed_after - r.borrowed() <= self.can_lend(team, model, ignoring_holds=True)

    def fits(self, team: str, model: str, need: int) -> int:
        """Whether ``need`` more GPUs of ``model`` fit the team's quota, nominal first: the GPUs
        of it that are borrowed (>= 0) when it fits, ``OVER_LIMIT`` when the team's own
        borrowing limit blocks it, ``COHORT_SHORT`` when the cohort cannot lend enough."""
        r = self._rows.get((team, model))
        if r is None:
            r = self.row(team, model)
        used = r.used
        nominal = r.nominal
        after = used + need
        if after <= nominal:
            return 0
        borrowed_after = after - nominal
        limit = r.borrowing_limit
        if limit is not None and borrowed_after > limit:
            return OVER_LIMIT
        s = self._sums.get((r.cohort, model))
        if s is None:
            return COHORT_SHORT
        borrowed_now = used - nominal if used > nominal else 0
        if borrowed_after - borrowed_now > s.own + s.lendable - r.lendable() - s.borrowed - s.held:
            return COHORT_SHORT
        return need if need < borrowed_after else borrowed_after

    def most(self, team: str, model: str) -> int:
        """The most GPUs of ``model`` that :meth:`fits` takes for the team now (0 or less when
        none): ``fits(team, model, n) >= 0`` exactly when ``n <= most(team, model)``, as fits
        only gets harder with ``n``. One number per (team, model) answers any size, where a
        caller would otherwise ask ``fits`` once per size."""
        r = self._rows.get((team, model))
        if r is None:
            r = self.row(team, model)
        room = r.nominal - r.used
        s = self._sums.get((r.cohort, model))
        if s is None:
            return room
        borrowed_now = r.used - r.nominal if r.used > r.nominal else 0
        lend = s.own + s.lendable - r.lendable() - s.borrowed - s.held
        reach = room + borrowed_now + lend
        if r.borrowing_limit is not None and room + r.borrowing_limit < reach:
            reach = room + r.borrowing_limit
        return reach if reach > room else room

    def add(self, team: str, model: str, gpus: int) -> None:
        """Charge ``gpus`` (negative to release) to the team's row and the cohort sums."""
        r = self.row(team, model)
        s = self._sums_for(r.cohort, model)
        s.lendable -= r.lendable()
        s.borrowed -= r.borrowed()
        r.used += gpus
        s.lendable += r.lendable()
        s.borrowed += r.borrowed()


def quota_reach(
    *,
    teams: Mapping[str, str],
    quotas: Iterable[Quota],
    cohort_quotas: Iterable[CohortQuota] = (),
) -> dict[tuple[str, str], int]:
    """The most GPUs of each model the engine could ever give each team: (team, model) → GPUs,
    only where that is more than 0.

    ``teams`` maps every team to its cohort (a team of ``quotas`` missing there is in
    ``"default"``, as in :class:`QuotaBook`). It is the bound :meth:`QuotaBook.fits` works
    within when nobody else uses anything: the team's nominal, plus what it may borrow, which is
    the smaller of its borrowing limit and what its cohort could lend it at most (the cohort's
    own quota and every other member's nominal, up to that member's lending limit). A team
    without a quota row has nominal 0 and no borrowing limit, so it reaches exactly what its
    cohort can lend. The Volcano queue sync uses this so that every team the engine may admit
    has a queue, capped where the engine caps it.
    """
    cohort_of = dict(teams)
    rows: dict[tuple[str, str], Quota] = {}
    for q in quotas:  # a duplicated row: the later one wins, as in QuotaBook
        rows[(q.team, q.model)] = q
        cohort_of.setdefault(q.team, "default")
    lendable: dict[tuple[str, str], int] = {}  # (cohort, model) → what all members could lend
    for (team, model), q in rows.items():
        most = max(0, q.nominal)
        if q.lending_limit is not None:
            most = min(most, max(0, q.lending_limit))
        key = (cohort_of[team], model)
        lendable[key] = lendable.get(key, 0) + most
    for cq in cohort_quotas:
        key = (cq.cohort, cq.model)
        lendable[key] = lendable.get(key, 0) + max(0, cq.nominal)
    models = sorted({m for _, m in rows} | {m for _, m in lendable})
    reach: dict[tuple[str, str], int] = {}
    for team, cohort in sorted(cohort_of.items()):
        for model in models:
            row = rows.get((team, model))
            nominal = max(0, row.nominal) if row else 0
            own_lent = 0
            if row is not None:
                own_lent = nominal if row.lending_limit is None else min(nominal, row.lending_limit)
            could_borrow = max(0, lendable.get((cohort, model), 0) - max(0, own_lent))
            if row is not None and row.borrowing_limit is not None:
                could_borrow = min(could_borrow, max(0, row.borrowing_limit))
            if nominal + could_borrow > 0:
                reach[(team, model)] = nominal + could_borrow
    return reach
