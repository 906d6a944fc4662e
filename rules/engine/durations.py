"""Expected runtimes: how long a queued job will run and when a running one will end,
learned from finished runs (what :mod:`rules.engine.forecast` replays the engine over).

Kept apart from the simulation: the cycle's estimates and the bench learn durations
without simulating anything.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rules.engine.reasons import count, fmt_wait

MIN_RUNS = 3
"""Fewer finished runs than this say nothing about the next one's length."""


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
