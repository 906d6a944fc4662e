"""A team's line: its pending jobs by priority (highest first), then submit time, then id; and
the lines of a decision, cut at the lookback and into priority bands.

Apart from ``core`` because the forecast keeps its queue in this order between steps.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from operator import attrgetter

from rules.engine.snapshot import PendingJob

_by_submit = attrgetter("submitted_at", "id")
_by_priority = attrgetter("priority")


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


def line_order(jobs: list[PendingJob]) -> list[PendingJob]:
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


@dataclass(frozen=True, slots=True)
class Lines:
    """The jobs a decision considers, cut into priority bands."""

    bands: dict[int, dict[str, list[PendingJob]]]
    """bands[priority][team] = that team's considered jobs of that priority, in line order."""
    beyond: dict[str, tuple[str, ...]]
    """Team -> the ids of its jobs past the lookback (only when named)."""
    starving: set[str]
    """The heads of a team's line in a band that waited past the starvation guard."""
    duplicates: bool
    """Whether some job id is considered twice (only then is a job's id checked)."""


def cut_lines(
    pending: Iterable[PendingJob],
    order: Callable[[list[PendingJob]], list[PendingJob]],
    lookback: int,
    guard: timedelta,
    now: datetime,
    *,
    name_beyond: bool,
) -> Lines:
    """Each team's line in ``order``, cut at ``lookback`` and into priority bands, with each
    band's head noted if it waited ``guard`` or longer."""
    grouped: dict[str, list[PendingJob]] = {}
    # Runs of one team (the whole team when the input is in line order) in one C call.
    for team, run in groupby(pending, key=_team):
        line = grouped.get(team)
        if line is None:
            grouped[team] = list(run)
        else:
            line.extend(run)
    bands: dict[int, dict[str, list[PendingJob]]] = {}
    beyond: dict[str, tuple[str, ...]] = {}
    starving: set[str] = set()
    considered = 0
    ids: set[str] = set()
    for team in sorted(grouped):
        jobs = order(grouped[team])
        if len(jobs) > lookback:
            if name_beyond:
                beyond[team] = tuple(map(_job_id, jobs[lookback:]))
            del jobs[lookback:]
        n = len(jobs)
        considered += n
        ids.update(map(_job_id, jobs))
        start = 0
        while start < n:  # cut into priority bands: the line is sorted by priority first
            head = jobs[start]
            end = bisect_right(jobs, -head.priority, start, key=_minus_priority)
            band = bands.get(head.priority)
            if band is None:
                band = bands[head.priority] = {}
            band[team] = jobs[start:end]
            # The head of the team's line in this band: the starvation guard's subject.
            if now - head.submitted_at >= guard:
                starving.add(head.id)
            start = end
    # Job ids are unique in any sane snapshot; only when they are not does a job whose id
    # was already decided need skipping (a set lookup per job, so only then).
    return Lines(bands, beyond, starving, considered != len(ids))


_job_id = attrgetter("id")
_team = attrgetter("team")


def _minus_priority(job: PendingJob) -> int:
    return -job.priority
