"""When a queued job may start: an estimate with its basis, until a real estimator exists.

Two bases, both stated with the estimate so a user can judge it:

- **runtime**: every running job stops at the latest when it reaches its max runtime. Walking
  them by that time, the GPUs the job needs (of its closest candidate model, or of its team's
  quota there when quota is what blocks it) are back by the first moment enough have come
  free. An upper bound on when they free up (jobs often end earlier), not a promise: jobs ahead
  in line may take them, and a gang needs them on few enough nodes.
- **history**: the median wait of jobs that started on the model recently, counted from when
  this job was queued. Needs a few waits to mean anything.

Pure (standard library only) so that it is unit-tested on its own; the portal gathers its
inputs in a couple of queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from scheduling.engine.reasons import count, fmt_wait

MIN_HISTORY = 3
"""Fewer recent waits than this say nothing about the next one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """GPUs a running job gives back when it reaches its max runtime, at the latest."""

    gpus: int
    by: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitHistory:
    """Recent waits of jobs that started on the model."""

    median: timedelta
    jobs: int
    window: timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class StartEstimate:
    """An estimate, never a promise: ``at`` is None when there is no basis for one."""

    at: datetime | None
    source: Literal["runtime", "history", "none"]
    basis: str
    """How it was reached, in words, e.g. ``"running jobs on A100-80GB reach their max runtime
    by 14:20 UTC, which frees the 4 GPUs it needs (1 free now) …"``."""


def _utc(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC")


def _runtime(
    *,
    now: datetime,
    need: int,
    label: str,
    available: int,
    releases: Sequence[Release],
    quota: bool,
) -> tuple[datetime | None, str]:
    what = f"of its team's {label} quota" if quota else f"{label} GPUs"
    if available >= need:
        return None, (
            f"{available} {what} are free now, as many as it needs: their number is not what "
            "holds it, so running jobs' runtimes say nothing"
        )
    got = max(0, available)
    for i, r in enumerate(sorted(releases, key=lambda r: (r.by, -r.gpus)), start=1):
        got += r.gpus
        if got >= need:
            at = max(now, r.by)
            return at, (
                f"running jobs {'of its team ' if quota else ''}on {label} reach their max "
                f"runtime by {_utc(at)} ({count(i, 'job')}), which frees the {need} {what} it "
                f"needs ({max(0, available)} free now); sooner if they end early, later if jobs "
                "ahead in line take them"
            )
    return None, (
        f"even when every running job {'of its team ' if quota else ''}on {label} ends, only "
        f"{got} {what} would be free of the {need} it needs"
    )


def _span(window: timedelta) -> str:
    """7 days, 24 hours, 90 minutes."""
    seconds = int(window.total_seconds())
    if seconds % 86400 == 0:
        return count(seconds // 86400, "day")
    if seconds % 3600 == 0:
        return count(seconds // 3600, "hour")
    return count(seconds // 60, "minute")


def _history(
    *, now: datetime, queued_at: datetime, label: str, history: WaitHistory | None
) -> tuple[datetime | None, str]:
    if history is None:
        return None, f"no recent waits on {label}"
    window = f"in the last {_span(history.window)}"
    if history.jobs == 0:
        return None, f"no job started on {label} {window}"
    if history.jobs < MIN_HISTORY:
        return None, (
            f"only {count(history.jobs, 'job')} started on {label} {window}, too few to tell "
            "a usual wait"
        )
    typical = queued_at + history.median
    median = f"median wait on {label} {fmt_wait(history.median)} over {count(history.jobs, 'job')}"
    if typical <= now:
        return None, f"it has waited longer than the {median} {window}"
    return typical, f"the {median} {window}, counted from when it was queued"


def estimate_start(
    *,
    now: datetime,
    queued_at: datetime,
    need: int,
    label: str,
    available: int,
    releases: Sequence[Release],
    history: WaitHistory | None,
    quota: bool = False,
) -> StartEstimate:
    """Estimate when a queued job needing ``need`` GPUs of model ``label`` may start.

    ``available``: GPUs of the model free now (or, when ``quota``, what its team's quota still
    allows there); ``releases``: what the running jobs that hold them give back, and by when.
    The runtime basis wins when it gives a time (it is about this job's GPUs); else the median
    wait; else there is no estimate, and the basis says why.
    """
    at, runtime_words = _runtime(
        now=now, need=need, label=label, available=available, releases=releases, quota=quota
    )
    typical, history_words = _history(now=now, queued_at=queued_at, label=label, history=history)
    if at is not None:
        return StartEstimate(at=at, source="runtime", basis=f"{runtime_words}; {history_words}")
    if typical is not None:
        return StartEstimate(
            at=typical, source="history", basis=f"{history_words}; {runtime_words}"
        )
    return StartEstimate(at=None, source="none", basis=f"{runtime_words}; {history_words}")
