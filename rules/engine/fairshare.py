"""Weighted dominant share: the fair-share term of the ordering.

For team *t* with weight *w*::

    allocation_share(t) = max over models m of  allocated(t, m) / capacity(m)
    usage_share(t)      = Σ_m usage(t, m) / (Σ_m capacity(m) x cost(m) x half_life / ln 2)
    share(t)            = (allocation_share(t) + usage_weight x usage_share(t)) / w

``capacity(m)`` is every GPU of model m in the snapshot's clusters (any state). ``usage`` is
cost-weighted, decayed GPU-hours; ``half_life / ln 2`` (hours) is the area under the decay curve,
so a team that kept the whole pool busy forever has usage share 1 — the same scale as an
allocation share. The lowest share goes first (progressive filling, as in DRF); a team's share
is recomputed after each of its admissions, which touches that team alone, so one heap update.
"""

from __future__ import annotations

import math
from datetime import timedelta


class ShareBook:
    """Allocated GPUs per (team, model) and the resulting shares, updated in-cycle."""

    __slots__ = ("_alloc", "_cache", "_capacity", "_usage", "_usage_weight", "_weight")

    def __init__(
        self,
        capacity: dict[str, int],
        cost: dict[str, float],
        weights: dict[str, float],
        usage: dict[str, float],
        half_life: timedelta,
        usage_weight: float,
    ) -> None:
        self._capacity = capacity
        self._weight = weights
        self._usage_weight = usage_weight
        self._alloc: dict[str, dict[str, int]] = {}
        self._cache: dict[str, float] = {}
        horizon_hours = half_life.total_seconds() / 3600.0 / math.log(2)
        pool = sum(c * cost.get(m, 1.0) for m, c in capacity.items()) * horizon_hours
        self._usage = {t: (u / pool if pool > 0 else 0.0) for t, u in usage.items()}

    def add(self, team: str, model: str, gpus: int) -> None:
        per = self._alloc.get(team)
        if per is None:
            per = self._alloc[team] = {}
        per[model] = per.get(model, 0) + gpus
        self._cache.pop(team, None)

    def allocation_share(self, team: str) -> tuple[float, str]:
        """(dominant share, its model); ties go to the model key that sorts first."""
        best = 0.0
        best_model = ""
        per = self._alloc.get(team)
        if not per:
            return best, best_model
        for m in sorted(per):
            cap = self._capacity.get(m, 0)
            if cap <= 0:
                continue
            s = per[m] / cap
            if s > best:
                best, best_model = s, m
        return best, best_model

    def usage_share(self, team: str) -> float:
        return self._usage.get(team, 0.0)

    def share(self, team: str) -> float:
        """The weighted dominant share; cached until the team's allocation changes."""
        cached = self._cache.get(team)
        if cached is not None:
            return cached
        weight = self._weight.get(team, 1.0)
        if weight <= 0:
            weight = 1e-9
        alloc, _ = self.allocation_share(team)
        value = (alloc + self._usage_weight * self.usage_share(team)) / weight
        self._cache[team] = value
        return value
